"""launch/job_controllers: what a launcher tells the job's controllers, read from the lists it last read
(launch/membership.KnownLists), over real sockets: controllers that refuse are passed over and named in one
line, and a job whose lists name none is told nothing (no high availability)."""
import socket
import sys

from torch.distributed.elastic.utils.distributed import get_free_port

from mindio_adaptor.core.job.controller_address import ENV_CONTROLLER
from mindio_adaptor.launch.job_controllers import JobControllers
from mindio_adaptor.launch.membership import KnownLists
from mindio_adaptor.launch.worker import Worker


class Log:
    def __init__(self):
        self.lines = []

    def info(self, text, *args):
        self.lines.append(text % args)


def refusing_address() -> str:
    with socket.socket() as probe:  # bound and closed: nothing listens there now
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def ended_worker() -> Worker:
    worker = Worker(0, 2)
    worker.start([sys.executable, "-c", "import sys; sys.exit(3)"], {})
    worker.proc.wait(30)
    return worker


def test_the_controllers_the_lists_name_now_are_told_and_refusals_are_named_once():
    lists, log = KnownLists(), Log()
    controllers = JobControllers("127.0.0.1", "token", lists, log)
    first, second = refusing_address(), refusing_address()
    lists.controllers = {ENV_CONTROLLER: f"{first},{second}"}  # as the launcher reads them later
    worker = ended_worker()
    assert controllers.process_ended(worker, 3) is False
    [line] = log.lines
    assert line.startswith(f"rank 2: the recovery controller was not told that pid {worker.pid} ended: ")
    assert first in line and second in line
    assert controllers.no_replacement([2, 3], "node 1 lost") is False
    assert log.lines[-1].startswith("the recovery controller was not told that ranks [2, 3] will not be replaced: ")


def test_without_a_controller_in_the_lists_the_workers_store_is_asked_and_its_silence_said():
    lists, log = KnownLists(master_port=get_free_port()), Log()
    assert JobControllers("127.0.0.1", "token", lists, log).contacts("why") is None
    assert log.lines[0].startswith(f"why: the workers' store at 127.0.0.1:{lists.master_port} did not answer")
