"""`mindio-adaptor timeline LOGS... -o timeline.svg|png`: each recovery of a run as a picture, one lane per
rank and one bar per phase, from the logs the job wrote (status/timeline_picture), and its critical path
printed (status/critical_path): which milestone waited for which rank, and how long."""
import sys
from pathlib import Path

FORMATS = (".svg", ".png")


def register(subparsers):
    p = subparsers.add_parser("timeline", help="draw each recovery of a run (one lane per rank) from its logs")
    p.add_argument("logs", nargs="+", type=Path, help="log files of the job's ranks (any order; mixed is fine)")
    p.add_argument("-o", "--output", type=Path, required=True, help="the picture: .svg or .png")
    p.set_defaults(func=run)


def run(args) -> int:
    from mindio_adaptor.status.critical_path import describe
    from mindio_adaptor.status.timeline_picture import NoRecoveries, draw, read_recoveries

    try:
        import matplotlib  # noqa: F401 (an optional dependency: named here rather than in a traceback)
    except ImportError:
        print("mindio-adaptor timeline: drawing needs matplotlib, which is not installed: "
              "pip install 'mindio_adaptor[timeline]'", file=sys.stderr)
        return 2
    if args.output.suffix.lower() not in FORMATS:
        raise SystemExit(f"-o {args.output}: the picture must end in .svg or .png")
    missing = [str(p) for p in args.logs if not p.is_file()]
    if missing:
        raise SystemExit(f"no such log file: {', '.join(missing)}")
    recoveries = read_recoveries(args.logs)
    try:
        draw(recoveries, args.output)
    except NoRecoveries as err:
        raise SystemExit(f"{err}: nothing to draw") from None
    lanes = sum(len(ranks) for ranks in recoveries.values())
    print(f"{args.output}: {len(recoveries)} recovery(ies), {lanes} rank lane(s)")
    for number, ranks in sorted(recoveries.items()):
        print(describe(number, ranks))
    return 0
