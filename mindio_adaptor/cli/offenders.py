"""`mindio-adaptor offenders`: the nodes the record of incidents holds (core/detection/offender_record), the repeat
offenders among them, and `--forget NODE` for a node an operator returned to service."""
from pathlib import Path

from mindio_adaptor.core.detection.offender_record import OffenderRecord, OffenderSettingError


def register(subparsers):
    p = subparsers.add_parser("offenders", help="the nodes that caused faults, and the repeat offenders among them")
    p.add_argument("--file", default=None,
                   help="the record (default: MINDIO_OFFENDER_FILE, else ~/.local/state/mindio_adaptor/offenders.json)")
    p.add_argument("--forget", metavar="NODE", default=None, help="drop every incident of NODE from the record")
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        record = OffenderRecord.from_env()
    except OffenderSettingError as err:
        print(f"mindio-adaptor offenders: {err}")
        return 2
    if args.file:
        record.path = Path(args.file)
    if args.forget is not None:
        print(f"forgot {record.forget(args.forget)} incident(s) of node {args.forget} in {record.path}")
        return 0
    incidents = record.incidents()
    offenders = record.offenders(incidents=incidents)
    print(f"{record.path}: {len(incidents)} incident(s); a repeat offender has {record.times} within "
          f"{record.window_s / 3600:g} h")
    by_node = {}
    for incident in incidents:
        by_node.setdefault(incident.node, []).append(incident)
    for node, found in sorted(by_node.items()):
        mark = "REPEAT OFFENDER" if node in offenders else ""
        print(f"  {node:<24} {len(found):>4}  {mark}")
        for i in found:
            print(f"      {i.when}  rank {i.rank}  {i.what}")
    return 0
