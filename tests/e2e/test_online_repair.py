"""Online repair on the real megatron.training (dp4, R=2, gloo, --enable-hbmfault-repair): the faulty
rank gets its optimizer shard from a replica peer, every rank rolls back and recomputes the step, no
process restarts, and the run ends bit-identical to the uninterrupted one."""
import json
import re
import socket
import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mindio_adaptor.status.critical_path import critical_path
from mindio_adaptor.status.timeline_picture import draw, read_recoveries
from mindio_adaptor.tiny.job import process_ids, run_training

pytestmark = pytest.mark.e2e
REPAIR = ["--enable-high-availability", "--enable-hbmfault-repair"]


def inject(spec, tmp_path):
    return {"MINDIO_FAULT_INJECT": spec, "MINDIO_FAULT_STATE_DIR": str(tmp_path / "faults")}


class StatusScraper:
    """Reads the in-job controller's /status.json and /metrics over HTTP while the run goes on."""

    def __init__(self, token="e2e-status-token"):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.token, self.snapshots, self.metrics = token, [], []
        self.env = {"MINDIO_STATUS_PORT": str(self.port), "MINDIO_TOKEN": token}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _get(self, path):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                         headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.read().decode()

    def _poll(self):
        while not self._done.wait(0.25):
            try:
                self.snapshots.append(json.loads(self._get("/status.json")))
                self.metrics.append({(s.name, tuple(sorted(s.labels.items()))): s.value for f in
                                     text_string_to_metric_families(self._get("/metrics")) for s in f.samples})
            except OSError:
                pass  # not up yet, or gone at the end of the run

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join(10)


def test_uce_error_in_forward_is_repaired_online(tmp_path, reference_runs):
    with StatusScraper() as status:
        run = run_training(REPAIR, env={**inject("raise:rank=1,step=5,msg=UCE ERROR injected", tmp_path),
                                        **status.env}).require_success()
    assert "step 5: training failed with RuntimeError: UCE ERROR injected; reported as UCE" in run.output
    assert "decision retry: faults 1:memory repair_step=4" in run.output
    assert re.search(r"repair of step 4: received my optimizer shard \(\d+ tensors, \d+ bytes\) from rank 3",
                     run.output)
    assert "online repair finished at step 4" in run.output
    assert sorted(run.loss_line_steps) == list(range(1, 9))  # step 5 computed again, its line printed once
    for rank, seen in process_ids(run.output).items():  # one process per rank, from start to end
        assert len(seen["starting"]) == 1 and seen["done"] == seen["starting"], (rank, seen)
    assert len(process_ids(run.output)) == 4
    reference, _ = reference_runs("ha")
    assert run.losses == reference.losses
    assert run.digest == reference.digest
    assert_status_followed_the_repair(status)
    assert_timeline_drawn_from_the_logs(run.output, tmp_path)


def assert_status_followed_the_repair(status):
    """Scraped during the run: healthy and NORMAL before the fault, the repair counted after it."""
    before = [s for s in status.snapshots if not s["recoveries"]]
    after = [s for s in status.snapshots if s["recoveries"] and s["recoveries"][0]["duration_s"] is not None]
    assert before and after, f"{len(status.snapshots)} scrapes: none before or none after the repair"
    assert before[-1]["state"] == "NORMAL" and before[-1]["health"]["healthy"] == 4
    repaired = after[-1]["recoveries"]
    assert [(r["strategy"], r["outcome"]) for r in repaired] == [("retry", "training goes on")]
    assert "rank 1 memory" in repaired[0]["faults"] and 0 < repaired[0]["duration_s"] < 60
    assert max(r["step"] for r in after[-1]["ranks"]) > max(r["step"] for r in before[-1]["ranks"])
    # the layout the ranks reported: dp4, 2 copies; every rank said its node (here the one host)
    assert after[-1]["term"] == 1 and [s["holders"] for s in after[-1]["shards"]] == [[0, 2], [1, 3]]
    assert all(r["domain"] for r in after[-1]["ranks"])
    last = status.metrics[-1]
    assert last[("mindio_recoveries_total", (("outcome", "training goes on"), ("strategy", "retry")))] == 1
    assert last[("mindio_decisions_total", (("strategy", "retry"),))] == 1
    assert last[("mindio_faults_total", (("kind", "memory"),))] >= 1


def assert_timeline_drawn_from_the_logs(output, tmp_path):
    log, picture = tmp_path / "run.log", tmp_path / "timeline.svg"
    log.write_text(output)
    draw(read_recoveries([log]), picture)
    svg = picture.read_text()
    assert {int(r) for r in re.findall(r'id="rank(\d+)-', svg)} == {0, 1, 2, 3}
    for bar in ("rank1-stopped", "rank1-groups_rebuilt", "rank1-shard_received", "rank3-shard_sent",
                "rank0-rolled_back", "rank1-first_step_done"):
        assert f'id="{bar}"' in svg, bar
    path = critical_path(read_recoveries([log])[1])  # which milestone waited for which rank
    assert path[0].event == "detected" and path[-1].event == "first step done"
    assert [m.rank for m in path if m.event == "shard received"] == [1]
    assert abs(sum(m.waited_s for m in path) - path[-1].at_s) < 1e-6


def test_uce_error_mid_update_is_repaired_at_the_last_completed_step(tmp_path, reference_runs):
    # dp4, R=2: instance {0,1} stops in step 5's optimizer phase (rank 1 faults, rank 0 waits for it in
    # the instance's collectives) while instance {2,3} completes step 5: the repair goes forward to
    # step 5, ranks 0 and 1 take their shards and step 5's state from ranks 2 and 3.
    spec = "raise:rank=1,step=5,phase=optimizer,msg=UCE ERROR mid-update"
    run = run_training(REPAIR, env=inject(spec, tmp_path)).require_success()
    assert "decision retry: faults 1:memory repair_step=5 repair_set=[0,1]" in run.output
    assert "not waiting for ranks [0]" in run.output
    assert re.search(r"rank 0\] INFO repair of step 5: received my optimizer shard .* from rank 2", run.output)
    assert re.search(r"rank 1\] INFO repair of step 5: received my optimizer shard .* from rank 3", run.output)
    assert "online repair finished at step 5" in run.output
    for rank, seen in process_ids(run.output).items():
        assert len(seen["starting"]) == 1 and seen["done"] == seen["starting"], (rank, seen)
    reference, _ = reference_runs("ha")
    # Step 5's loss is reduced over the data-parallel group after the update, for display only: the
    # fault interrupted that reduction and the step is not recomputed; every rank still holds its part of
    # it, so the rollback reduces it again and step 5's line is printed once, as the uninterrupted run's.
    assert "step 5: loss line printed after the recovery (reduced again from every rank's part)" in run.output
    assert sorted(run.loss_line_steps) == list(range(1, 9))
    assert run.losses == reference.losses
    assert run.grad_norms == reference.grad_norms
    assert run.digest == reference.digest


def test_two_ranks_holding_different_shards_repaired_together(tmp_path, reference_runs):
    # dp4, R=2: shard 1 on ranks 1 and 3, shard 0 on ranks 0 and 2
    spec = "raise:rank=1,step=5,msg=UCE ERROR a;raise:rank=2,step=5,msg=UCE ERROR b"
    run = run_training(REPAIR, env=inject(spec, tmp_path)).require_success()
    assert "repair_set=[1,2]" in run.output
    assert re.search(r"rank 1\] INFO repair of step 4: received my optimizer shard .* from rank 3", run.output)
    assert re.search(r"rank 2\] INFO repair of step 4: received my optimizer shard .* from rank 0", run.output)
    reference, _ = reference_runs("ha")
    assert run.digest == reference.digest
    assert sorted(run.loss_line_steps) == list(range(1, 9))


def test_tp2_dp2_fault_repaired_online(tmp_path, reference_runs):
    tp2 = ["--tensor-model-parallel-size", "2"]
    run = run_training([*REPAIR, *tp2], env=inject("raise:rank=1,step=5,msg=UCE ERROR tp", tmp_path))
    run.require_success()
    assert "online repair finished at step 4" in run.output
    reference, _ = reference_runs("ha_tp2")
    assert run.digest == reference.digest
    assert sorted(run.loss_line_steps) == list(range(1, 9))


def test_without_replicas_the_periodic_checkpoint_is_reloaded_online(tmp_path, reference_runs):
    # R=1: rank 1's shard has no other holder; every rank loads the checkpoint of step 3 again, in the
    # running processes, and steps 4 and 5 are computed again.
    ckpt = tmp_path / "ckpt"
    flags = [*REPAIR, "--distributed-optimizer-no-replica", "--save", str(ckpt), "--save-interval", "3"]
    run = run_training(flags, env=inject("raise:rank=1,step=5,msg=UCE ERROR no replica", tmp_path))
    run.require_success()
    assert ("decision retry: faults 1:memory repair_step=4 repair_set=[1] repairable=0 dump_possible=0 "
            "reload_step=3") in run.output
    assert len(re.findall(r"reloaded the checkpoint of step 3 from", run.output)) == 4
    assert "online reload finished at step 3" in run.output
    for rank, seen in process_ids(run.output).items():
        assert len(seen["starting"]) == 1 and seen["done"] == seen["starting"], (rank, seen)
    reference, _ = reference_runs("ha_no_replica")
    assert run.losses == reference.losses
    assert sorted(run.loss_line_steps) == list(range(1, 9))  # steps 4 and 5, computed again, printed once
    assert run.digest == reference.digest


def test_second_fault_during_the_repair_falls_back_to_the_dump(tmp_path, reference_runs):
    ckpt = tmp_path / "ckpt"
    # dp4, R=2: after rank 2 dies, shard 0 is still on rank 0 and shard 1 on rank 3.
    spec = "raise:rank=1,step=5,msg=UCE ERROR first;kill:rank=2,step=5,phase=repair"
    run = run_training([*REPAIR, "--save", str(ckpt), "--save-interval", "1000"],
                       env={**inject(spec, tmp_path), "MINDIO_REBUILD_TIMEOUT_S": "5"})
    assert run.returncode != 0
    assert "decision retry: faults 1:memory repair_step=4" in run.output
    assert "fault injection: firing kill on rank 2 at step 5 (repair)" in run.output
    assert "dump of step 4 published" in run.output
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    resumed = run_training(["--load", str(ckpt), "--enable-high-availability"]).require_success()
    reference, _ = reference_runs("ha")
    assert resumed.losses[5] == reference.losses[5]
    assert resumed.digest == reference.digest
