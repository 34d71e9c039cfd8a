"""A job manager's SIGTERM (to every rank, as a job manager stops a job; one rank's signal is enough,
Megatron exchanges the flag at the end of each step): with high availability every rank saves the
step it just completed and exits cleanly; resuming from that checkpoint ends bit-identical to the
uninterrupted run."""
import pytest

from mindio_adaptor.tiny.job import run_training

pytestmark = pytest.mark.e2e
HA = ["--enable-high-availability"]


def test_sigterm_to_every_rank_saves_the_last_completed_step(tmp_path, reference_runs):
    ckpt = tmp_path / "ckpt"
    every_rank = ";".join(f"sigterm:rank={r},step=5" for r in range(4))
    env = {"MINDIO_FAULT_INJECT": every_rank, "MINDIO_FAULT_STATE_DIR": str(tmp_path / "faults")}
    stopped = run_training([*HA, "--save", str(ckpt), "--save-interval", "1000"], env=env)
    assert stopped.returncode == 0, stopped.output[-4000:]
    for rank in range(4):
        assert f"fault injection: firing sigterm on rank {rank} at step 5 (forward)" in stopped.output
    assert "training failed" not in stopped.output and "dump of step" not in stopped.output
    assert "exiting program after receiving SIGTERM" in stopped.output
    assert sorted(stopped.losses) == [1, 2, 3, 4, 5]  # step 5 was running when the signal came: it finishes
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "5"

    resumed = run_training([*HA, "--load", str(ckpt)], env=env).require_success()
    reference, _ = reference_runs("ha")
    assert sorted(resumed.losses) == [6, 7, 8]
    assert resumed.losses[6] == reference.losses[6]
    assert resumed.digest == reference.digest
