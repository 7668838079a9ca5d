"""``python -m collectors``: the agent without the analyzer installed (standard library only).

Same options as ``oomtrace collect``; a bad setting is one line on stderr and exit status 2; a
run in which every source failed throughout exits 1.
"""

from __future__ import annotations

import argparse
import logging
import sys

from collectors.config import DEFAULTS, HELP, ConfigError, build_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m collectors",
        description="Sample a serving node into crash-safe segments (the oomtrace node agent).",
    )
    parser.add_argument(
        "--prometheus", action="append", default=[], metavar="URL", help=HELP["prometheus"]
    )
    parser.add_argument("--nvml", action="store_true", help=HELP["nvml"])
    parser.add_argument("--log", action="append", default=[], metavar="PATH", help=HELP["log"])
    parser.add_argument("--out", required=True, metavar="DIR", help=HELP["out"])
    for option, default in DEFAULTS.items():
        metavar = "SIZE" if option in ("max-disk", "max-response") else "TIME"
        help_text = f"{HELP[option]} (default: {default})"
        parser.add_argument(f"--{option}", default=default, metavar=metavar, help=help_text)
    parser.add_argument("--node", default=None, metavar="NAME", help=HELP["node"])
    parser.add_argument("--duration", default=None, metavar="TIME", help=HELP["duration"])
    parser.add_argument("--log-from-end", action="store_true", help=HELP["log-from-end"])
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="collectors: %(message)s")
    args = _parser().parse_args(argv)
    try:
        config = build_config(
            out=args.out,
            prometheus=args.prometheus,
            nvml=args.nvml,
            logs=args.log,
            node=args.node,
            duration=args.duration,
            log_from_start=not args.log_from_end,
            **{key: getattr(args, key) for key in (o.replace("-", "_") for o in DEFAULTS)},
        )
    except ConfigError as err:
        sys.stderr.write(f"collectors: error: {err}\n")
        return 2
    from collectors.agent import run  # noqa: PLC0415 - after the arguments are known to be good

    summary = run(config)
    sys.stderr.write(f"collectors: {summary.one_line()}\n")
    if summary.every_source_failed:
        sys.stderr.write(f"collectors: error: {summary.failure_line()}\n")
        return 1
    return 0
