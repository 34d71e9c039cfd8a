"""`mindio-adaptor pause` and `mindio-adaptor continue`: hold a running job's training after a step and let it
go on (csrc/controller/pause.h), through its controller's status server (the token in the Authorization
header; status/commands). Every rank holds before its next optimizer update: nothing is rolled back."""
import time

from mindio_adaptor.cli.status_client import add_server_arguments, request_json, token_of

POLL_S = 0.5


def register(subparsers):
    p = subparsers.add_parser("pause", help="pause a running job after a step, until `continue` or a time limit")
    add_server_arguments(p)
    p.add_argument("--after-step", type=int, default=-1,
                   help="the step after which every rank holds (default: the next step all ranks can still reach)")
    p.add_argument("--hold", type=float, default=None, metavar="SECONDS",
                   help="continue by itself after this long (default: the controller's MINDIO_PAUSE_LIMIT_S, else 600)")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="wait up to this long until every rank holds (exit 1 if they do not)")
    p.set_defaults(func=run_pause)
    c = subparsers.add_parser("continue", help="end the pause of a running job")
    add_server_arguments(c)
    c.set_defaults(func=run_continue)


def run_pause(args) -> int:
    token = token_of(args)
    body = {"after_step": args.after_step}
    if args.hold is not None:
        body["hold_s"] = args.hold
    print(request_json(args.controller, token, "/pause", body)["message"])
    if args.wait <= 0:
        return 0
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        status = request_json(args.controller, token, "/status.json")
        if _every_rank_holds(status):
            print("paused: every rank holds")
            return 0
        time.sleep(POLL_S)
    print(f"not every rank holds after {args.wait:g} s (state {status['state']})")
    return 1


def _every_rank_holds(status: dict) -> bool:
    live = [r for r in status["ranks"] if "left" not in r["flags"] and "dead" not in r["flags"]]
    return status["state"] == "PAUSE" and all("paused" in r["flags"] for r in live)


def run_continue(args) -> int:
    print(request_json(args.controller, token_of(args), "/continue", {})["message"])
    return 0
