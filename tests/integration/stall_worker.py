"""A process that stresses one suspected cause of a heartbeat lapse (test_heartbeat_lapse.py).

    python stall_worker.py processor STRESS SECONDS PORT   register rank 0 of 1 with the controller at PORT,
        stress for SECONDS, print the processor's stats as one JSON line, leave
    python stall_worker.py controller SECONDS              host a controller for 1 rank, print its port,
        flood stderr from a thread for SECONDS (the test does not read it), print the controller's events

STRESS: gil   the training thread holds the GIL without a break (one long C call)
        fork  the training thread forks helpers back to back, as Megatron's checkpoint writers do
        idle  nothing (a healthy rank)
"""
import json
import multiprocessing
import sys
import threading
import time


def hold_the_gil(seconds):
    """sum() over a range is one C call: it never lets another Python thread run until it returns."""
    n = 10 ** 6
    start = time.perf_counter()
    sum(range(n))
    per_item = (time.perf_counter() - start) / n
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sum(range(int(min(seconds, deadline - time.monotonic()) / per_item) + 1))


def _write_and_exit(path):
    with open(path, "wb") as f:
        f.write(b"\0" * (1 << 20))


def fork_helpers(seconds, tmp="/tmp"):
    ctx = multiprocessing.get_context("fork")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        procs = [ctx.Process(target=_write_and_exit, args=(f"{tmp}/stall_worker_{i}",)) for i in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=30)


def processor(stress, seconds, port):
    from mindio_adaptor.ttp import processor as tp

    tp.tft_init_processor(0, 1, enable_tls=False)
    tp.tft_start_processor("127.0.0.1", port)
    time.sleep(1.0)  # a few beats on an idle process first
    {"gil": hold_the_gil, "fork": fork_helpers, "idle": time.sleep}[stress](seconds)
    time.sleep(1.0)  # the beat after the stress tells whether the heartbeat thread kept time
    print(json.dumps(tp._require().stats()), flush=True)
    tp.tft_destroy_processor()


def controller(seconds):
    from mindio_adaptor.ttp import controller as ctl

    ctl.tft_init_controller(-1, 1)
    print(ctl.tft_start_controller("127.0.0.1", 0, enable_tls=False), flush=True)

    stop = threading.Event()

    def flood():
        line = "x" * 200 + "\n"
        while not stop.is_set():
            sys.stderr.write(line)  # blocks once the pipe is full, until the test reads it
            sys.stderr.flush()

    flooder = threading.Thread(target=flood)
    flooder.start()
    time.sleep(seconds)
    stop.set()
    print(json.dumps([(kind, detail) for _, kind, detail in ctl.controller_events()]), flush=True)
    flooder.join(timeout=60)  # the test reads stderr now
    ctl.tft_destroy_controller()  # logs a line, which says how many were dropped before it


if __name__ == "__main__":
    if sys.argv[1] == "processor":
        processor(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
    else:
        controller(float(sys.argv[2]))
