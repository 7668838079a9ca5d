"""``python -m tools.sample_incidents [--out DIR] [NAME ...]``: write the sample incidents."""

from __future__ import annotations

import argparse
from pathlib import Path

from tools.sample_incidents import INCIDENTS, ROOT, generate


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.sample_incidents")
    parser.add_argument(
        "names", nargs="*", help=f"incidents (default: all): {', '.join(INCIDENTS)}"
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT, help="where to write (default: sample_logs)"
    )
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(INCIDENTS))
    if unknown:
        parser.error(f"no incident named {', '.join(unknown)}; choose from {', '.join(INCIDENTS)}")
    for directory in generate(args.out, args.names or None):
        files = sorted(p for p in directory.rglob("*") if p.is_file())
        size = sum(p.stat().st_size for p in files)
        print(f"{directory}: {len(files)} files, {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
