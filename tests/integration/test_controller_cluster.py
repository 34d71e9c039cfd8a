"""The standalone controller command and the cluster-manager ("MindX") link, with real processes."""
import json
import os
import re
import subprocess
import sys

import pytest

from controller_harness import REPO, WORKER, Job
from mindio_adaptor.ttp import controller as ctl

pytestmark = pytest.mark.integration


def test_cluster_manager_picks_the_strategy(tmp_path, monkeypatch):
    monkeypatch.setenv("MINDIO_FAULT_COLLECT_TIME", "0.1")
    monkeypatch.setenv("MINDIO_TEST_ACTION_TIME_LIMIT", "5")
    job = Job(tmp_path, 4)
    calls = []
    try:
        ctl.tft_register_mindx_callback("report_fault_ranks", lambda faults: calls.append(("faults", faults)))
        ctl.tft_register_mindx_callback("report_stop_complete", lambda *a: calls.append(("stopped",) + a))

        def choose(faults, strategies):
            calls.append(("strategies", faults, strategies))
            ctl.tft_notify_controller_change_strategy("dump")

        ctl.tft_register_mindx_callback("report_strategies", choose)
        ctl.tft_register_mindx_callback("report_result", lambda *a: calls.append(("result",) + a))
        job.wait_ready()
        ctl.tft_notify_controller_stop_train({1: 0})  # the cluster manager saw a memory error on rank 1
        results = job.wait_results(range(4))
        assert all(r["result"] == "exit" for r in results.values())
        assert calls[0] == ("faults", {1: 0})
        assert calls[1] == ("strategies", {1: 0}, ["retry", "dump", "exit"])
        assert calls[-1] == ("result", 0, "ok", {1: 0}, "dump")
        # DP [0,1,2,3], R=2, rank 1 untrusted: shard 1 is saved by rank 3.
        assert [d for _, _, d in job.controller_events("savers")] == ["type 0 step 5 [0,3]"]
        assert [d for _, _, d in job.controller_events("cluster_strategy")] == ["dump"]
    finally:
        job.close()


def test_standalone_controller_command_runs_an_online_repair(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), MINDIO_HEARTBEAT_INTERVAL="0.2", MINDIO_FAULT_COLLECT_TIME="0.1",
               MINDIO_TEST_ACTION_TIME_LIMIT="5")
    controller = subprocess.Popen([sys.executable, "-m", "mindio_adaptor.cli", "controller", "--world-size", "2",
                                   "--port", "0", "--host", "127.0.0.1"], stdout=subprocess.PIPE,
                                  stderr=open(tmp_path / "controller.log", "w"), env=env, text=True)
    workers = []
    try:
        line = controller.stdout.readline()
        port = int(re.search(r":(\d+) for 2 ranks", line).group(1))
        trigger = tmp_path / "trigger"
        workers = [subprocess.Popen([sys.executable, str(WORKER), "--rank", str(r), "--world-size", "2",
                                     "--port", str(port), "--fail-rank", "0", "--trigger", str(trigger)],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
                   for r in range(2)]
        for w in workers:
            assert '"ready"' in w.stdout.readline()
        trigger.write_text("go")
        outputs = [w.communicate(timeout=20)[0] for w in workers]
        events = [[json.loads(x) for x in out.splitlines()] for out in outputs]
        assert [e["result"] for e in events[0] + events[1] if "result" in e] == ["done", "done"]
        repairs = [e["args"][3] for e in events[0] + events[1] if e.get("handler") == "repair"]
        assert sorted(r["repair_type"] for r in repairs) == [0, 1] and repairs[0]["src"] == [1]
        controller.terminate()
        assert controller.wait(timeout=10) == 0
        assert "finished in state NORMAL" in controller.stdout.read()
    finally:
        for proc in workers + [controller]:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
