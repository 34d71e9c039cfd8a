"""The `mindio-adaptor` command line.

Each subcommand lives in its own module in this package (a pair of opposites, pause and continue, shares
one) and exposes `register(subparsers)`, which adds its parser and sets `func` (called with the parsed
namespace, returns the exit code).
"""
import argparse
import importlib
import os
import sys

from mindio_adaptor.core.process import process_ending

# Module names (inside mindio_adaptor.cli) of the subcommands, in the order --help lists them.
SUBCOMMAND_MODULES = [
    "policy",
    "controller",
    "status",
    "pause",
    "drain",
    "offenders",
    "timeline",
    "demo",
    "launch",
    "upstream",
]


def build_parser():
    parser = argparse.ArgumentParser(
        prog="mindio-adaptor",
        description="Fault tolerance for Megatron-LM training (replicated optimizer, dying-gasp "
        "checkpoint, online repair, process replacement).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


def main(argv=None):
    """The command's exit code; `argv` None: this process is the command, whose exit is then bounded (a launcher or a
    controller still alive 30 s after its exit began names the threads that held it and ends, exit code 1)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if argv is None:
        process_ending.bound_the_exit(" ".join(filter(None, ["mindio-adaptor", args.command, f"pid {os.getpid()}"])))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args) or 0
    except BrokenPipeError:  # output piped into `head` and the like: not an error of ours
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
