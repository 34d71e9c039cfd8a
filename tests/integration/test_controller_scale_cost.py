"""The controller's cost per heartbeat does not grow with the number of connected ranks.

Regression test for the server loop that walked every connection on every wake-up (to flush output
and check deadlines): at the same heartbeat rate (1600/s), CPU per heartbeat was
16.6 us at 128 ranks, 35.8 us at 2048 and 56.5 us at 4096 before the fix, about 14 us at all three
after it. The
cost is CPU time of the controller's own process, so a busy machine changes it less than wall time."""
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import controller_scale  # noqa: E402

pytestmark = pytest.mark.integration

RATE = 1600  # heartbeats per second, the same for both sizes


def cpu_per_heartbeat(n, tmp_path):
    opts = controller_scale.Options(heartbeat_s=n / RATE, window_s=2.0, client_procs=1, collect_s=0.1)
    cluster = controller_scale.Cluster(n, opts, str(tmp_path))
    try:
        cluster.wait_registered()
        time.sleep(opts.heartbeat_s + 0.3)  # past the first round of beats
        steady = cluster.steady()
    finally:
        cluster.close()
    assert steady["dead"] == 0 and steady["hb_handled"] > RATE / 2, steady
    return steady["controller_cpu"] / steady["hb_handled"]


def test_cpu_per_heartbeat_does_not_grow_with_ranks(tmp_path):
    small = cpu_per_heartbeat(128, tmp_path)
    large = cpu_per_heartbeat(4096, tmp_path)
    # Equal in principle; the slack absorbs a shared machine. The O(N) walk made it 3.4x.
    assert large < 2 * small, f"{small * 1e6:.1f} us per heartbeat at 128 ranks, {large * 1e6:.1f} at 4096"
