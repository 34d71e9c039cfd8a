"""core/abandonable_waits on real gloo processes: a stop pulls a thread out of an all-reduce its peer
never joins, and a wait that completes is unchanged (same sum, a late peer waited for)."""
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
        procs[1].communicate(timeout=60)
    finally:
        for p in procs:
            p.kill()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"rank 0 printed no result; stderr:\n{err[-3000:]}"
    return json.loads(lines[-1])


def test_a_stop_abandons_a_collective_whose_peer_never_comes():
    result = run_pair("stop")
    assert result["ended"] == "abandoned", result
    assert "stop was requested" in result["why"]
    # stop asked 1 s in; the next short wait (0.5 s) notices: well before the peer's 8 s or any timeout
    assert 1.0 <= result["s"] < 5.0, result


def test_a_completed_collective_is_unchanged():
    result = run_pair("late")
    assert result == {"ended": "completed", "sum": 3.0, "s": result["s"]}
    assert result["s"] >= 1.0  # it waited for the late peer through several short waits
