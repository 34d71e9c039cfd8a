"""`mindio-adaptor launch`: start one node's training processes like torchrun, restarting only a failed one
with worker reboot. The launcher itself lives in mindio_adaptor.launch; see docs/launch.md."""
from mindio_adaptor.launch.args import DESCRIPTION, add_arguments, config_from_args


def register(subparsers):
    parser = subparsers.add_parser("launch", help="torchrun-compatible launcher that can restart only a failed "
                                                  "worker (process replacement)", description=DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=lambda args: _run(args, parser))


def _run(args, parser) -> int:
    from mindio_adaptor.launch.entry import run

    return run(*config_from_args(args, parser))
