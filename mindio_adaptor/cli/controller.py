"""`mindio-adaptor controller`: a standalone controller (the reference's rank -1 mode), started by a
job manager beside the training job. Runs until SIGINT/SIGTERM or until the job exits.

It binds loopback unless told otherwise, and listens on another address only with the job's token
(MINDIO_TOKEN, or --token-file): without one anybody who reaches the port could register as a rank or
report a rank's process ended. Every start-up error is one line on stderr, exit 2, printed before the
"listening" line a parent waits for (docs/security.md)."""
import logging
import os
import signal
import sys
import threading

from mindio_adaptor.core.job.controller_address import ENV_TOKEN
from mindio_adaptor.core.job.tls_config import TlsConfig, TlsConfigError
from mindio_adaptor.core.process import private_files
from mindio_adaptor.core.process.private_files import NotPrivate, read_private_file

logger = logging.getLogger(__name__)

MAX_WORLD_SIZE = 1 << 20  # the native controller's limit (a rank table entry each)


class StartError(ValueError):
    """A start-up error of the user's making: one line, exit 2."""


def register(subparsers):
    p = subparsers.add_parser("controller", help="run a standalone recovery controller for a job")
    p.add_argument("--world-size", required=True, help="number of training ranks")
    p.add_argument("--port", required=True, help="TCP port (0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; any other needs the job's token)")
    p.add_argument("--token-file", default=None,
                   help="file holding the job's token, readable by its owner only (mode 0600); else MINDIO_TOKEN")
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
    p.add_argument("--status-port", default=None,
                   help="serve the status page and /metrics on this port (default: MINDIO_STATUS_PORT, else none); "
                        "requests need the job's token")
    p.add_argument("--status-host", default=None, help="interface of the status page (default: MINDIO_STATUS_HOST, "
                                                       "else 127.0.0.1)")
    p.set_defaults(func=run)


def int_in(flag: str, value: str, low: int, high: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise StartError(f"{flag} {value!r}: expected a whole number in {low}..{high}") from None
    if not low <= number <= high:
        raise StartError(f"{flag} {value}: expected a whole number in {low}..{high}")
    return number


def read_token_file(path: str) -> str:
    """The token from a file that only its owner can read: one others could read is no secret."""
    try:
        return read_private_file(path)
    except NotPrivate as err:
        raise StartError(f"--token-file {path}: {err}") from None


def is_loopback(host: str) -> bool:
    try:
        return private_files.is_loopback(host)
    except ValueError as err:
        raise StartError(f"--host {host!r}: {err}") from None


def job_token(args) -> str:
    token = os.environ.get(ENV_TOKEN, "")
    if args.token_file:
        from_file = read_token_file(args.token_file)
        if token and token != from_file:
            raise StartError(f"--token-file {args.token_file} and {ENV_TOKEN} give different tokens: give one")
        token = from_file
    if not token and not is_loopback(args.host):
        raise StartError(f"--host {args.host}: refusing to listen beyond this machine without the job's token "
                         f"(anyone reaching the port could register as a rank or end one); set {ENV_TOKEN} or "
                         f"--token-file FILE (mode 600) here and {ENV_TOKEN} in the job, or bind --host 127.0.0.1")
    return token


def checked(args):
    """(world size, port, status port or None, token), or StartError naming the value and the fix."""
    from mindio_adaptor.status.controller_source import status_port_from_env

    world_size = int_in("--world-size", args.world_size, 1, MAX_WORLD_SIZE)
    port = int_in("--port", args.port, 0, 65535)
    try:
        status_port = (status_port_from_env() if args.status_port is None
                       else int_in("--status-port", args.status_port, 0, 65535))
    except ValueError as err:
        raise StartError(str(err)) from None
    token = job_token(args)
    if status_port is not None and not token:
        raise StartError(f"--status-port {status_port}: the status page answers only requests with the job's token; "
                         f"set {ENV_TOKEN} or --token-file FILE")
    try:
        TlsConfig.from_env()  # read again by the status server: a mistake is said here, before listening
    except TlsConfigError as err:
        raise StartError(str(err)) from None
    return world_size, port, status_port, token


def run(args) -> int:
    try:
        world_size, port, status_port, token = checked(args)
    except StartError as err:
        print(f"mindio-adaptor controller: {err}", file=sys.stderr, flush=True)
        return 2
    os.environ[ENV_TOKEN] = token  # the native controller and the status server read it there
    return serve(args, world_size, port, status_port)


def serve(args, world_size: int, port: int, status_port) -> int:
    from mindio_adaptor.core.detection.offender_record import OffenderRecord, OffenderSettingError
    from mindio_adaptor.core.policy import PolicyFileError
    from mindio_adaptor.status.controller_source import start_if_asked
    from mindio_adaptor.status.goodput import goodput_line
    from mindio_adaptor.status.offender_watch import OffenderWatch
    from mindio_adaptor.status.server import StatusServerError
    from mindio_adaptor.status.sub_health_responder import SubHealthResponder
    from mindio_adaptor.ttp import controller as ctl

    def say(line: str) -> None:
        print(f"controller: {line}", file=sys.stderr, flush=True)

    try:
        record = OffenderRecord.from_env()
        responder = SubHealthResponder.from_env(ctl, say=say)
    except (OffenderSettingError, PolicyFileError, ValueError) as err:
        print(f"mindio-adaptor controller: cannot start: {err}", file=sys.stderr, flush=True)
        return 2
    ctl.tft_init_controller(-1, world_size, enable_uce=not args.no_uce, enable_arf=args.arf,
                            backup=args.backup, enable_scale_in=args.elastic)
    watch = OffenderWatch(record, ctl.controller_events, ctl.controller_ranks, say=say, on_offender=responder.offender)
    said_remembered = False
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    status = None
    try:
        try:
            status = start_if_asked(status_port, args.status_host)
            port = ctl.tft_start_controller(args.host, port, enable_tls=False)
        except (StatusServerError, RuntimeError, OSError) as err:
            print(f"mindio-adaptor controller: cannot start: {err}", file=sys.stderr, flush=True)
            return 2
        tls = " over TLS 1.3 with the job's certificate" if TlsConfig.from_env() else ""
        print(f"{'backup ' if args.backup else ''}controller listening on {args.host}:{port} for {world_size} "
              f"ranks{tls}", flush=True)
        if status is not None:
            print("status page on %s://%s:%d/" % (status.scheme, *status.address), flush=True)
        while not done.wait(0.5):
            if not said_remembered and ctl.controller_state() != "INIT":  # leading (a backup may never)
                said_remembered = True
                watch.say_remembered()
            watch.poll()
            responder.poll()
            if ctl.controller_state() == "EXIT":
                done.wait(1.0)  # let the last replies arrive
                break
        watch.poll()  # the events of the job's end
        print(f"controller finished in state {ctl.controller_state()}", flush=True)
        if ctl.controller_state() != "INIT":  # a backup that never led accounted nothing of the job
            print(goodput_line(ctl.controller_goodput()), flush=True)
        return 0
    finally:
        if status is not None:
            status.stop()
        ctl.tft_destroy_controller()
