"""Records the real controller's event logs of elastic scenarios (real processor processes, controller_worker.py)
for tests/unit/test_scaling_status.py: the controller's events, rank table and layout at chosen moments, as
JSON. Not a test; run by hand when the controller's events change:

    PYTHONPATH=. python tests/integration/record_scaling_logs.py tests/unit/scaling_event_logs.json
"""
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from conftest import FAST_ENV  # noqa: E402
from controller_harness import Job, wait_until  # noqa: E402
from mindio_adaptor.ttp import controller as ctl  # noqa: E402


def snapshot():
    return {"state": ctl.controller_state(), "ranks": ctl.controller_ranks(), "layout": ctl.controller_layout(),
            "events": [list(e) for e in ctl.controller_events()]}


def at_normal(what):
    wait_until(lambda: ctl.controller_state() == "NORMAL", 30, what)


def scale_in_and_back(tmp):
    """dp8 R=2 loses ranks 6 and 7, scales in to dp6 after the wait; rank 6 returns alone, is not ready within
    the scale-out's wait and is sent away; rank 6 returns again, ready, and after the wait the job grows to dp7
    without rank 7 (a partial scale-out); then rank 7 returns and the job scales out to dp8."""
    job = Job(tmp, 8, enable_arf=True, enable_scale_in=True, heartbeat_s=0.5, relayout=1, idle_after_repair=1,
              idle_s=120)
    try:
        job.wait_ready()
        for rank in (6, 7):
            job.procs[rank].send_signal(signal.SIGKILL)
        wait_until(lambda: job.controller_events("relayout"), 30, "the layout at dp6")
        at_normal("training at dp6")
        scaled_in = snapshot()
        job.spawn(6, restarted=True, track=False, ready_after_s=10).wait(timeout=40)
        wait_until(lambda: job.controller_events("scale_out_abandoned"), 30, "rank 6 sent away")
        waiting = snapshot()
        job.spawn(6, restarted=True, absent=7)
        wait_until(lambda: len(job.controller_events("relayout")) == 2, 40, "the layout after the partial scale-out")
        at_normal("training at dp7")
        partly_back = snapshot()
        job.spawn(7, restarted=True)
        wait_until(lambda: len(job.controller_events("relayout")) == 3, 40, "the layout after the scale-out")
        at_normal("training at dp8")
        return {"scaled_in": scaled_in, "sent_away": waiting, "partly_back": partly_back, "scaled_out": snapshot()}
    finally:
        job.close()


def downgrade(tmp):
    """The cluster manager chooses the scale-in (downgrade) when rank 5 is lost: dp8 -> dp7."""
    job = Job(tmp, 8, enable_arf=True, enable_scale_in=True, heartbeat_s=0.5, relayout=1, idle_after_repair=1)
    ctl.tft_register_mindx_callback("report_strategies",
                                    lambda faults, strategies: ctl.tft_notify_controller_change_strategy("downgrade"))
    try:
        job.wait_ready()
        job.procs[5].send_signal(signal.SIGKILL)
        wait_until(lambda: job.controller_events("relayout"), 30, "the layout at dp7")
        at_normal("training at dp7")
        return {"downgraded": snapshot()}
    finally:
        ctl._cluster_callbacks.clear()
        job.close()


def slice_leaves(tmp):
    """tp2 x dp4: rank 5 is lost and not replaced, rank 4, its slice peer, leaves: dp4 -> dp3."""
    job = Job(tmp, 8, enable_arf=True, enable_scale_in=True, heartbeat_s=0.5, tp=2, relayout=1,
              idle_after_repair=1)
    try:
        job.wait_ready()
        job.procs[5].send_signal(signal.SIGKILL)
        wait_until(lambda: job.controller_events("relayout"), 30, "the layout at dp3")
        at_normal("training at dp3")
        return {"left_with_slice": snapshot()}
    finally:
        job.close()


def no_layout_reported(tmp, idle_after_repair):
    """The ranks report no layout at the new size (the worker without --relayout): dp8 loses rank 5, and a
    process returns for rank 5 and is killed. idle_after_repair=1: the survivors train on, the return is
    ready and the scale-out begins, so the kill fails its REBUILD_GROUP and the job ends; 0: the survivors
    have finished, nothing scales out, and the return is lost before any scale-out."""
    job = Job(tmp, 8, enable_arf=True, enable_scale_in=True, heartbeat_s=0.5, idle_after_repair=idle_after_repair)
    try:
        job.wait_ready()
        job.procs[5].send_signal(signal.SIGKILL)
        wait_until(lambda: job.controller_events("relayout_incomplete"), 30, "the scale-in's end")
        late = job.spawn(5, restarted=True, track=False)
        wait_until(lambda: job.controller_events("returned"), 20, "rank 5's return")
        if idle_after_repair:
            wait_until(lambda: job.controller_events("scale_out"), 20, "the scale-out")
        late.kill()
        late.wait(timeout=10)
        wait_until(lambda: job.controller_events("return_lost"), 10, "the returned process's loss")
        if idle_after_repair:
            wait_until(lambda: ctl.controller_state() in ("EXIT", "FINAL"), 20, "the end of the job")
        return {"scale_out_failed" if idle_after_repair else "return_lost": snapshot()}
    finally:
        job.close()


def main(out_path):
    os.environ.update(FAST_ENV, MINDIO_ARF_WAIT_S="4")
    logs = {}
    scenarios = [scale_in_and_back, downgrade, slice_leaves, lambda tmp: no_layout_reported(tmp, 1),
                 lambda tmp: no_layout_reported(tmp, 0)]
    for scenario in scenarios:
        with tempfile.TemporaryDirectory() as tmp:
            recorded = scenario(tmp)
            logs.update(recorded)
            print(f"recorded {', '.join(recorded)}", flush=True)
    Path(out_path).write_text(json.dumps(logs, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
