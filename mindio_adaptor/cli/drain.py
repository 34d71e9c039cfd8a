"""`mindio-adaptor drain`: hand ranks, or every rank of a node, over to new processes while the job runs (a hot
switch, csrc/controller/controller_hot_switch.cpp), for maintenance or a sub-healthy device. Through the job
controller's status server (the token in the Authorization header; status/commands). Every rank holds after
one step; the leaving processes exit 0 and their launchers start the new ones (warm spares where they have
them); the state comes from live replica peers; no step is lost."""
import time

from mindio_adaptor.cli.status_client import add_server_arguments, request_json, token_of

POLL_S = 0.5


def register(subparsers):
    p = subparsers.add_parser("drain", help="move ranks, or a node's, to new processes with no step lost (hot switch)")
    add_server_arguments(p)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--rank", type=int, nargs="+", metavar="RANK", help="the ranks to move")
    what.add_argument("--node", metavar="NODE", help="every live rank of this node (its name on the status page)")
    p.add_argument("--after-step", type=int, default=-1,
                   help="the step after which the ranks move (default: the next step all ranks can still reach)")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="wait up to this long until the new processes train (exit 1 if they do not)")
    p.set_defaults(func=run_drain)


def run_drain(args) -> int:
    token = token_of(args)
    before = _switches(request_json(args.controller, token, "/status.json"))
    body = {"after_step": args.after_step, **({"node": args.node} if args.node else {"ranks": args.rank})}
    print(request_json(args.controller, token, "/hot_switch", body)["message"])
    if args.wait <= 0:
        return 0
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        done = _switches(request_json(args.controller, token, "/status.json"))[len(before):]
        ended = [r for r in done if r["outcome"] != "in progress"]
        if ended:
            print(f"hot switch: {ended[0]['outcome']} (after {ended[0]['duration_s']:.2f} s)")
            return 0 if ended[0]["outcome"] == "training goes on" else 1
        time.sleep(POLL_S)
    print(f"the hot switch did not end within {args.wait:g} s")
    return 1


def _switches(status: dict) -> list:
    return [r for r in status["recoveries"] if r["strategy"] == "hot_switch"]
