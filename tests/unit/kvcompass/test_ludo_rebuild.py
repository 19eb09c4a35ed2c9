"""LudoTable.rebuild: a restarted maintenance unit republishes its keys in a chosen epoch."""

from __future__ import annotations

import numpy as np
import pytest

from kvcompass.errors import InvalidInputError
from kvcompass.ludo import LudoTable, LudoView


def test_rebuild_keeps_every_value__new_epoch_full_image() -> None:
    table = LudoTable(200, seed=3)
    keys = np.arange(1, 150, dtype=np.uint64) * np.uint64(7919)
    table.update(keys, np.zeros(keys.size, np.uint64), keys % np.uint64(3) + np.uint64(1))
    image = table.rebuild(5)
    assert image.header and image.commit and image.params.epoch == 5 == table.epoch
    view = LudoView.empty(image.params)
    view.apply(image)
    assert (view.lookup(keys) == table.get(keys)).all()
    assert (table.get(keys) == keys % np.uint64(3) + np.uint64(1)).all()


def test_rebuild_refuses_an_older_epoch__epoch_must_grow() -> None:
    table = LudoTable(64, seed=1)
    with pytest.raises(InvalidInputError, match="epoch"):
        table.rebuild(0)
