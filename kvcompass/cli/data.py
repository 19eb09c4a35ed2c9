"""The one place that says where the project's data sets are: ``../shared/data`` beside the
repository's root, or ``$KVCOMPASS_DATA_DIR``.

Every checkout has that layout, and so has CI (a fresh clone with a copy of ``shared/`` beside
it), so a path resolved from this file, never an absolute one, finds the data on every machine;
the variable is for trees that live elsewhere (a git worktree, an installed package). Not a
subcommand: a helper for the subcommands and tests that read a trace. Must not read the files
(the readers are ``sim.workloads``).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository's root (this file is ``kvcompass/cli/data.py``)."""
SHARED_DATA_DIR = Path(os.environ.get("KVCOMPASS_DATA_DIR") or REPO_ROOT.parent / "shared" / "data")
MOONCAKE_TRACE = SHARED_DATA_DIR / "mooncake" / "conversation_trace.jsonl"
"""The Mooncake FAST'25 conversation trace (``../shared/data/README.md``)."""
