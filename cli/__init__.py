"""The ``kvcompass`` command: one module per subcommand, each a thin shell starter.

A command module registers its flags at import (``register(subparsers)``) using only the standard
library and light project modules, and imports its shell (the simulator, the pipeline, an edge, a
worker, the end-to-end demo) inside ``run``, so ``kvcompass --help`` and ``kvcompass kafka status``
never pay for numba, aiohttp or Faust, and an install with one extra runs its own command.
Logging is configured in ``cli.main`` and nowhere else. Nothing imports this package: it is the
top of the tree (``tests/unit/test_layering.py``).
"""
