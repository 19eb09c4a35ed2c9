"""The one decider of an edge: lookup, overlay, joint score, booking, feedback, vectors.

``Decider`` (``kvcompass.decider.decider``) owns the whole forwarding decision of one edge and
is what the simulator and the edge both drive, event by event; ``RegionBooking`` is the exact
queue model of a region's own workers (route-and-reserve); ``QueueVector`` (v3) and
``Shortlist`` are what edges send each other, with their wire sizes.
"""

from kvcompass.decider.booking import RegionBooking
from kvcompass.decider.decider import Decider
from kvcompass.decider.plans import DeciderPaths, Plan, Sent, Verdict
from kvcompass.decider.vector import QueueVector, Shortlist

__all__ = [
    "Decider",
    "DeciderPaths",
    "Plan",
    "QueueVector",
    "RegionBooking",
    "Sent",
    "Shortlist",
    "Verdict",
]
