"""``python -m collectors.torch_hook --pythonpath`` prints the directory to put on PYTHONPATH
so that every Python process started with ``OOMTRACE_TORCH_HOOK_DIR`` set runs the hook."""

from __future__ import annotations

import argparse
import sys

from collectors.torch_hook import AUTOLOAD_DIR, ENV_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m collectors.torch_hook",
        description="Activate the oomtrace PyTorch hook in an unmodified server.",
        epilog=(
            f"usage: export {ENV_DIR}=/var/lib/oomtrace; "
            'export PYTHONPATH="$(python -m collectors.torch_hook --pythonpath)'
            '${PYTHONPATH:+:$PYTHONPATH}"; vllm serve ...'
        ),
    )
    parser.add_argument("--pythonpath", action="store_true", help="print the directory")
    args = parser.parse_args(argv)
    if not args.pythonpath:
        parser.print_help()
        return 2
    sys.stdout.write(f"{AUTOLOAD_DIR}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
