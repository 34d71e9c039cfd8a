"""The scale benchmark at a small N: it completes, the controller counts heartbeats, and every
simulated rank receives STOP after a reported memory error (then the repair flow returns to NORMAL)."""
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import controller_scale  # noqa: E402

pytestmark = pytest.mark.integration


def test_scale_bench_small_n_every_rank_gets_stop(tmp_path):
    # A 0.5 s heartbeat: a loaded 2-core host has starved the controller for ~1 s, which at 0.2 s
    # (three missed periods) declared every simulated rank dead.
    opts = controller_scale.Options(heartbeat_s=0.5, reps=1, window_s=0.6, client_procs=2, collect_s=0.1,
                                    stop_timeout_s=10, flow_timeout_s=10)
    result = controller_scale.measure(64, opts, str(tmp_path))
    assert result["n"] == 64 and "skipped" not in result, result
    [fault] = result["faults"]
    assert fault["stops"] == 64, fault
    assert 0 < fault["first"] <= fault["last"] < 10, fault
    # Kernel receive times (brought onto the monotonic clock): after the report, never after handling.
    assert 0 < fault["first_arrival"] <= fault["last_arrival"] <= fault["last"] + 1e-3, fault
    assert fault["flow"] >= fault["last"], fault
    assert result["dead"] == 0
    # 64 ranks at 0.5 s: about 128 heartbeats/s sent; the controller handles what arrives.
    assert result["hb_sent"] > 50 and result["hb_handled"] > 50, result
    assert math.isfinite(result["controller_cpu"]) and result["controller_cpu"] >= 0
