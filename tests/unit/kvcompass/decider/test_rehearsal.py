"""``rehearse`` drives a scratch decider through every entry point the shells call (the edge's
start-up warm-up relies on it to compile every kernel before the first request)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from kvcompass.decider import Decider
from kvcompass.decider.rehearsal import rehearse
from tests.unit.kvcompass.decider.conftest import deciders, prompt, two_regions

NOT_ENTRY_POINTS = {
    "for_deployment",  # construction
    "lookup_keys",  # called by on_refused itself
    "gauges", "open_forwards", "set_unroutable", "books",  # read-outs and masks, no kernels
    "on_migration_done",  # the migration consumer's, a dict update
}  # fmt: skip


class Spy:
    """Forwards to a decider, recording every public method called."""

    def __init__(self, d: Decider) -> None:
        self._d = d
        self.called: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        got = getattr(self._d, name)
        if callable(got) and not name.startswith("_"):
            self.called.add(name)
        return got


@pytest.mark.parametrize("booking", [True, False])
def test_rehearse__calls_every_entry_point_of_the_decider(booking: bool) -> None:
    spy = Spy(deciders(two_regions(), booking=booking)[0])
    calls = rehearse(spy, prompt(600), 1_000.0)  # type: ignore[arg-type]
    public = {n for n, _ in inspect.getmembers(Decider) if not n.startswith("_")}
    expected = public - NOT_ENTRY_POINTS
    if not booking:  # without a booking there is no relay to accept or refuse
        expected -= {"on_relay", "on_refused"}
    assert spy.called == expected
    assert calls == (25 if booking else 18)
