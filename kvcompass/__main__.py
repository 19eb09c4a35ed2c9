"""`kvcompass` command line: parses flags and starts a shell (DESIGN §2).

This is the only place, with `kvcompass/cli/`, allowed to import the shells (pipeline, edge,
workers, sim), and each subcommand imports its shell lazily so `kvcompass kafka status` does not
pay for numba or Faust. Logging is configured here and nowhere else.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

# Subcommand modules; each defines `register(subparsers) -> None` and sets `func` on its parser.
COMMAND_MODULES: tuple[str, ...] = (
    "kvcompass.cli.demo",
    "kvcompass.cli.kafka",
    "kvcompass.cli.sim",
    "kvcompass.cli.pipeline",
    "kvcompass.cli.replay",
    "kvcompass.cli.worker",
    "kvcompass.cli.edge",
    "kvcompass.cli.demo_faults",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvcompass",
        description="Cross-region KV cache discovery plane: index, pipeline, edge, simulator.",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
