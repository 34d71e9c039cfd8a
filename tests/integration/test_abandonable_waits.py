"""core/communication/abandonable_waits and core/communication/group_graveyard on real gloo processes: a stop pulls a thread out of an
all-reduce its peer never joins; a wait that completes is unchanged (same sum, a late peer waited for); a
receive is waited on whole (a late sender's values arrive) and a stop pulls a thread out of one whose sender
never comes;
and the abandoned group, dropped, holds its last holder until the group's timeout unless the graveyard
holds it."""
import json
import subprocess
import sys
from pathlib import Path

from torch.distributed.elastic.utils.distributed import get_free_port

WORKER = str(Path(__file__).with_name("abandon_worker.py"))


def run_pair(mode):
    port = get_free_port()
    procs = [subprocess.Popen([sys.executable, WORKER, str(rank), str(port), mode], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    try:
        out, err = procs[0].communicate(timeout=60)
    finally:
        for p in procs:  # rank 1 only sleeps (alive, silent) once rank 0 has its answer
            p.kill()
            p.communicate()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"rank 0 printed no result; stderr:\n{err[-3000:]}"
    return json.loads(lines[-1])


def test_a_stop_abandons_a_collective_whose_peer_never_comes():
    result = run_pair("stop")
    assert result["ended"] == "abandoned", result
    assert "stop was requested" in result["why"]
    # stop asked 1 s in; the next short wait (0.2 s) notices: well before the peer's 10 s or any timeout
    assert 1.0 <= result["s"] < 5.0, result


def test_a_completed_collective_is_unchanged():
    result = run_pair("late")
    assert result == {"ended": "completed", "sum": 3.0, "s": result["s"]}
    assert result["s"] >= 1.0  # it waited for the late peer through several short waits


def test_a_receive_waits_for_a_late_sender_whole():
    # Cut into 0.2 s waits, gloo's first timed-out slice would break the group ("Timed out waiting 200ms
    # for recv operation to complete"): a pipeline stage waiting for its neighbour failed so.
    result = run_pair("late_send")
    assert result["ended"] == "completed" and result["values"] == [5.0, 7.0], result
    assert result["s"] >= 2.0, result


def test_a_stop_abandons_a_receive_whose_sender_never_comes():
    # A pipeline stage waits on a point-to-point operation whole, on a helper thread: a stop still takes the
    # training thread out of it (a send to a stage that stopped held a healthy stage past the stop's limit).
    result = run_pair("stop_recv")
    assert result["ended"] == "abandoned", result
    assert "point-to-point operation" in result["why"]
    assert 1.0 <= result["s"] < 5.0, result


def test_the_graveyard_keeps_the_abandoned_group_off_the_dropping_thread():
    held = run_pair("drop")  # without it: the drop waits for the group's 6 s timeout
    assert held["ended"] == "abandoned" and held["drop_s"] >= 3.0, held
    buried = run_pair("bury")
    assert buried["ended"] == "abandoned" and buried["drop_s"] < 1.0, buried
