"""``kvcompass`` command line: builds the parser from every command module and runs one.

Entry point of the ``kvcompass`` console script (and of ``python -m cli``). Building the parser
imports the command modules, which register flags only; the chosen command's ``run`` imports its
shell. Logging is configured here and nowhere else: repeated lines are rate-limited with a count
and aiohttp's malformed-request tracebacks become one WARNING line (``wire.logs``). A
configuration error (``ConfigError``, wherever a command raises it) is one line on stderr and
exit status 2, like a bad flag; no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

# Subcommand modules; each defines `register(subparsers) -> None` and sets `func` on its parser.
COMMAND_MODULES: tuple[str, ...] = (
    "cli.demo",
    "cli.kafka",
    "cli.sim",
    "cli.pipeline",
    "cli.replay",
    "cli.worker",
    "cli.edge",
    "cli.demo_faults",
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
    from kvcompass.errors import ConfigError
    from wire.logs import install, one_line

    repeats = install()
    try:
        result = args.func(args)
    except ConfigError as exc:
        print(one_line(exc), file=sys.stderr)
        return 2
    finally:
        repeats.summary()
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
