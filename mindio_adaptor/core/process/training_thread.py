"""What the training thread and the processor thread tell each other during a recovery.

Work on the model (a save, a repair) is handed to the parked training thread: device state (the
current CUDA/NPU device, the CPU device layer's torch function mode) is per thread, and the training
framework expects to run there."""
import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, Tuple

from mindio_adaptor.core.communication import abandonable_waits

# A parked training thread's longest wait for work: what it waits for (a posted stage, the decision: wake)
# ends the wait at once, so this bounds only how late it notices a signal or its end of waiting.
JOB_WAIT_S = 0.5
_WAKE = None  # posted by wake(): no work, only the end of a wait


class TrainingThread:
    def __init__(self):
        self.stop_requested = threading.Event()
        self.parked = threading.Event()
        self.jobs: "queue.Queue[Tuple[Callable[[], Any], Future]]" = queue.Queue()
        self.keep_ports: set = set()  # connections a stop must not break: store, controller
        self.backend = "gloo"

    def use_backend(self, backend: str) -> None:
        """On gloo a stop must also be able to pull the training thread out of a collective wait
        (core/communication/abandonable_waits); NCCL's and HCCL's abort already fail such a wait."""
        self.backend = backend
        if backend == "gloo":
            abandonable_waits.install(self.stop_pending)

    def stop_pending(self) -> bool:
        """A stop was asked for and the training thread has not parked yet."""
        return self.stop_requested.is_set() and not self.parked.is_set()

    def reset(self):
        """The training thread resumes training: the next stop starts from scratch."""
        self.stop_requested.clear()
        self.parked.clear()

    def wake(self) -> None:
        """End the parked thread's current wait for work (its decision came, or it must leave)."""
        self.jobs.put(_WAKE)

    def run_parked(self, fn: Callable[[], Any], timeout: float, park_wait: float) -> Any:
        """Run fn() on the training thread once it is parked (waiting up to park_wait for that); its
        result, or its exception, here."""
        if not self.parked.wait(park_wait):
            raise RuntimeError("the training thread is not parked; refusing to touch a model it may still change")
        future: Future = Future()
        self.jobs.put((fn, future))
        return future.result(timeout)

    def run_jobs(self, wait_s: float = JOB_WAIT_S) -> None:
        """On the training thread: run what the handlers posted, waiting up to wait_s for one (or a wake)."""
        try:
            job = self.jobs.get(timeout=wait_s)
        except queue.Empty:
            return
        if job is _WAKE:
            return
        fn, future = job
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the handler, which reports it to the controller
                future.set_exception(exc)
