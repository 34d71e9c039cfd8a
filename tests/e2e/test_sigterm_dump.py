"""A job manager's SIGTERM: with high availability every rank saves the step it just completed and
exits cleanly; resuming from that checkpoint ends bit-identical to the uninterrupted run."""
import pytest

from mindio_adaptor.tiny_job import run_training

pytestmark = pytest.mark.e2e
HA = ["--enable-high-availability"]


def test_sigterm_to_one_rank_saves_the_last_completed_step_everywhere(tmp_path, reference_runs):
    ckpt = tmp_path / "ckpt"
    env = {"MINDIO_FAULT_INJECT": "sigterm:rank=2,step=5", "MINDIO_FAULT_STATE_DIR": str(tmp_path / "faults")}
    stopped = run_training([*HA, "--save", str(ckpt), "--save-interval", "1000"], env=env)
    assert stopped.returncode == 0, stopped.output[-4000:]
    assert "fault injection: firing sigterm on rank 2 at step 5 (forward)" in stopped.output
    assert "exiting program after receiving SIGTERM" in stopped.output
    assert sorted(stopped.losses) == [1, 2, 3, 4, 5]  # step 5 was running when the signal came: it finishes
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "5"

    resumed = run_training([*HA, "--load", str(ckpt)], env=env).require_success()
    reference, _ = reference_runs("ha")
    assert sorted(resumed.losses) == [6, 7, 8]
    assert resumed.losses[6] == reference.losses[6]
    assert resumed.digest == reference.digest
