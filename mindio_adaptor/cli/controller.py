"""`mindio-adaptor controller`: a standalone controller (the reference's rank -1 mode), started by a
job manager beside the training job. Runs until SIGINT/SIGTERM or until the job exits."""
import logging
import signal
import threading

logger = logging.getLogger(__name__)


def register(subparsers):
    p = subparsers.add_parser("controller", help="run a standalone recovery controller for a job")
    p.add_argument("--world-size", type=int, required=True, help="number of training ranks")
    p.add_argument("--port", type=int, required=True, help="TCP port (0 picks a free one)")
    p.add_argument("--host", default="0.0.0.0", help="address to bind (default all)")
    p.add_argument("--no-uce", action="store_true", help="never repair online; dump instead")
    p.add_argument("--backup", action="store_true",
                   help="a backup controller: idle until ranks that lost their controller register with it, "
                        "then it leads the job under the next term (list it after the active one in "
                        "MINDIO_CONTROLLER_ADDR)")
    p.add_argument("--arf", action="store_true",
                   help="process replacement: a dead rank is replaced by a restarted process (the launcher "
                        "starts it with MINDIO_RESTARTED=1) instead of dumping")
    p.add_argument("--elastic", action="store_true",
                   help="elastic training's scale-in (with --arf): when a dead rank's replacement does not come "
                        "within MINDIO_ARF_WAIT_S, the survivors go on at a smaller data-parallel size instead of "
                        "dumping (docs/elastic.md)")
    p.add_argument("--status-port", type=int, default=None,
                   help="serve the status page and /metrics on this port (default: MINDIO_STATUS_PORT, else none); "
                        "requests need the job's token (MINDIO_TOKEN)")
    p.add_argument("--status-host", default=None, help="interface of the status page (default: MINDIO_STATUS_HOST, "
                                                       "else 127.0.0.1)")
    p.set_defaults(func=run)


def run(args) -> int:
    from mindio_adaptor.status.controller_source import start_if_asked
    from mindio_adaptor.ttp import controller as ctl

    if args.world_size < 1:
        raise SystemExit(f"--world-size must be >= 1, got {args.world_size}")
    ctl.tft_init_controller(-1, args.world_size, enable_uce=not args.no_uce, enable_arf=args.arf,
                            backup=args.backup, enable_scale_in=args.elastic)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    status = None
    try:
        port = ctl.tft_start_controller(args.host, args.port, enable_tls=False)
        print(f"{'backup ' if args.backup else ''}controller listening on {args.host}:{port} for {args.world_size} "
              f"ranks", flush=True)
        status = start_if_asked(args.status_port, args.status_host)
        if status is not None:
            print("status page on http://%s:%d/" % status.address, flush=True)
        while not done.wait(0.5):
            if ctl.controller_state() == "EXIT":
                done.wait(1.0)  # let the last replies arrive
                break
        print(f"controller finished in state {ctl.controller_state()}", flush=True)
        return 0
    finally:
        if status is not None:
            status.stop()
        ctl.tft_destroy_controller()
