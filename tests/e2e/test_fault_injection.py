"""MINDIO_FAULT_INJECT read by the adaptor inside the real megatron.training (no recovery yet: the
job stops as stock Megatron does; the dying-gasp checkpoint builds on this)."""
import pytest

from mindio_adaptor.tiny.job import run_training

pytestmark = pytest.mark.e2e
HA = ["--enable-high-availability"]


def inject(spec, state_dir):
    return {"MINDIO_FAULT_INJECT": spec, "MINDIO_FAULT_STATE_DIR": str(state_dir)}


def test_raise_fires_on_the_planned_rank_step_and_phase(tmp_path):
    run = run_training(HA, env=inject("raise:rank=1,step=5,phase=backward,msg=UCE ERROR injected",
                                      tmp_path))
    assert run.returncode != 0
    assert "fault injection: firing raise on rank 1 at step 5 (backward)" in run.output
    assert "RuntimeError: UCE ERROR injected" in run.output
    assert sorted(run.losses) == [1, 2, 3, 4]
    assert (tmp_path / "raise-rank1-step5-backward.fired").exists()


def test_a_fired_fault_does_not_fire_again_in_the_same_job(tmp_path):
    (tmp_path / "kill-rank2-step3-optimizer.fired").write_text("fired earlier in this job\n")
    run = run_training(HA, env=inject("kill:rank=2,step=3,phase=optimizer", tmp_path)).require_success()
    assert "already fired in this job" in run.output
    assert sorted(run.loss_line_steps) == list(range(1, 9))


def test_kill_in_the_optimizer_phase_ends_the_process(tmp_path):
    run = run_training(HA, env=inject("kill:rank=2,step=3,phase=optimizer", tmp_path))
    assert run.returncode != 0
    assert "fault injection: firing kill on rank 2 at step 3 (optimizer)" in run.output
    assert "Signal 9" in run.output or "SIGKILL" in run.output
    assert 3 not in run.losses


@pytest.mark.parametrize("spec, message", [
    ("explode:rank=1,step=2", "unknown kind 'explode'"),
    ("raise:rank=9,step=2", "rank 9 does not exist (world size 4)"),
])
def test_malformed_spec_stops_the_run_at_start(tmp_path, spec, message):
    run = run_training(HA, env=inject(spec, tmp_path))
    assert run.returncode != 0
    assert "FaultSpecError" in run.output and message in run.output
    assert not run.losses
