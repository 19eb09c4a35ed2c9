"""Where the data sets the project ships are: ``data/`` at the repository's root.

The Mooncake conversation trace (Apache-2.0, ``data/mooncake/README.md`` has its provenance and
licence) is vendored there, so a fresh clone runs every test, benchmark and README command with
no other directory beside it. ``$KVCOMPASS_DATA_DIR`` points elsewhere (an installed package, which
carries no data, or a tree of your own traces). Imports nothing heavy: ``kvcompass --help``
reads the default path from here. Must not read the files (the readers are ``sim.workloads``).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
"""The repository's root (this file is ``sim/datasets.py``)."""
DATA_DIR = Path(os.environ.get("KVCOMPASS_DATA_DIR") or REPO_ROOT / "data")
MOONCAKE_TRACE = DATA_DIR / "mooncake" / "conversation_trace.jsonl"
"""The Mooncake FAST'25 conversation trace (12,031 requests, 512-token blocks)."""
