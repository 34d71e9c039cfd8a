"""Why could a live rank's heartbeat lapse (issue 12)? Each suspected cause, reproduced with real
processes: a training thread that holds the GIL, a training thread that forks helpers back to back
(Megatron's checkpoint writers), and a controller whose stderr nobody reads (its log lines used to
block the I/O thread that reads heartbeats). None may make a live rank silent. Heartbeats every 0.5 s:
a rank is suspect after 1.5 s of silence."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mindio_adaptor.ttp import controller as ctl

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent
WORKER = [sys.executable, str(HERE / "stall_worker.py")]
ENV = dict(os.environ, MINDIO_HEARTBEAT_INTERVAL="0.5",
           PYTHONPATH=os.pathsep.join(p for p in [str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")] if p))
STRESS_S = 6.0


def run_rank(stress, port, log):
    with open(log, "w") as err:
        done = subprocess.run([*WORKER, "processor", stress, str(STRESS_S), str(port)], env=ENV, stdout=subprocess.PIPE,
                              stderr=err, text=True, timeout=90)
    assert done.returncode == 0, Path(log).read_text()[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("stress", ["gil", "fork"])
def test_a_busy_training_thread_does_not_silence_the_heartbeat(stress, tmp_path):
    ctl.tft_init_controller(-1, 1)
    try:
        port = ctl.tft_start_controller("127.0.0.1", 0, enable_tls=False)
        stats = run_rank(stress, port, tmp_path / "rank.log")
        events = ctl.controller_events()
    finally:
        ctl.tft_destroy_controller()
    assert stats.get("late_heartbeats", 0) == 0, (stats, (tmp_path / "rank.log").read_text()[-2000:])
    assert stats["registrations"] == 1
    kinds = [kind for _, kind, _ in events]
    assert "register" in kinds and "suspect" not in kinds and "fault" not in kinds, events


def test_a_controller_whose_stderr_is_not_read_keeps_reading_heartbeats(tmp_path):
    controller = subprocess.Popen([*WORKER, "controller", str(STRESS_S + 4)], env=ENV, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
    try:
        port = int(controller.stdout.readline())
        time.sleep(1.0)  # the flood fills the pipe: from now on every write to it blocks
        stats = run_rank("idle", port, tmp_path / "rank.log")
        events = [tuple(e) for e in json.loads(controller.stdout.readline())]
        _, err = controller.communicate(timeout=60)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait(timeout=10)
    assert controller.returncode == 0, err[-2000:]
    assert stats["registrations"] == 1 and stats.get("late_heartbeats", 0) == 0, stats
    assert ("register", "rank 0") in events and ("state", "INIT->NORMAL") in events, events
    assert not [e for e in events if e[0] in ("suspect", "fault", "dead")], events
    assert "log lines dropped: stderr took nothing for 1000 ms (nobody read it)" in err
