"""End-to-end runs on one machine: a whole deployment as processes, its faults, its load.

``e2e.cluster.LocalCluster`` starts every process of a multi-region KVCompass deployment as a real
subprocess of the ``kvcompass`` CLI (broker, maintenance units, emulated workers, sidecars, one
edge per region; ``e2e.process`` and ``e2e.probes`` are its helpers); ``e2e.faults`` runs fault
scenarios against it; ``e2e.loadgen``, ``e2e.demo`` and ``e2e.report`` are the comparison demo.
Nothing here is imported by the core, the shells or the simulator; ``cli/`` starts it.
"""
