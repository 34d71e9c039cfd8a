"""The dying-gasp checkpoint after a fault, on the real megatron.training (dp4, R=2, gloo): the
survivors save one checkpoint of the last step that completed everywhere, the processes exit
non-zero, and a stock --load of it ends bit-identical to the uninterrupted run."""
import re

import pytest

from mindio_adaptor.tiny.job import run_training

pytestmark = pytest.mark.e2e
HA = ["--enable-high-availability"]


def faulty_run(tmp_path, spec, ckpt, flags=(), save_interval=1000, **env_extra):
    env = {"MINDIO_FAULT_INJECT": spec, "MINDIO_FAULT_STATE_DIR": str(tmp_path / "faults"), **env_extra}
    return run_training([*HA, *flags, "--save", str(ckpt), "--save-interval", str(save_interval)], env=env)


def assert_resumes_like_the_reference(ckpt, dumped_step, reference_runs, flags=()):
    resumed = run_training(["--load", str(ckpt), *HA, *flags]).require_success()
    reference, _ = reference_runs("ha")
    assert sorted(resumed.losses) == list(range(dumped_step + 1, 9))
    # Megatron logs the loss of the first step after a resume exactly; later lines average two steps.
    assert resumed.losses[dumped_step + 1] == reference.losses[dumped_step + 1]
    assert resumed.digest == reference.digest


LEGACY = ["--ckpt-format", "torch"]


@pytest.fixture(scope="module")
def raised_in_legacy_format(tmp_path_factory):
    """One faulted run checked two ways: rank 1 raises in step 5's forward, the dump is in Megatron's legacy
    torch format (the torch_dist dump is every other dump test's), and a stock --load of it resumes."""
    tmp_path = tmp_path_factory.mktemp("raised")
    ckpt = tmp_path / "ckpt"
    run = faulty_run(tmp_path, "raise:rank=1,step=5", ckpt, flags=LEGACY)
    listing = sorted(p.name for p in ckpt.iterdir()) if ckpt.is_dir() else []
    return run, ckpt, listing


def test_raise_on_one_rank_dumps_the_last_completed_step(raised_in_legacy_format):
    run, ckpt, listing = raised_in_legacy_format
    assert run.returncode != 0
    assert "step 5: training failed with RuntimeError: Other ERROR; reported as UNKNOWN" in run.output
    assert "dump of step 4 published" in run.output
    assert "training ended by the recovery controller" in run.output
    assert sorted(run.losses) == [1, 2, 3, 4]
    assert listing == ["iter_0000004", "latest_checkpointed_iteration.txt"]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "4"


def test_dump_in_the_legacy_torch_format(raised_in_legacy_format, reference_runs):
    _, ckpt, _ = raised_in_legacy_format
    assert (ckpt / "iter_0000004" / "mp_rank_00" / "distrib_optim.pt").exists()
    assert_resumes_like_the_reference(ckpt, 4, reference_runs, flags=LEGACY)


def test_killed_rank_survivors_dump(tmp_path, reference_runs):
    # A periodic save at step 3 first: the dump is each saver's second save in its process (Megatron's
    # writer keeps a helper process from the first one, which torchrun's SIGTERM ended).
    ckpt = tmp_path / "ckpt"
    run = faulty_run(tmp_path, "kill:rank=2,step=5,phase=backward", ckpt, save_interval=3)
    assert run.returncode != 0
    assert "lost the connection of rank 2" in run.output
    assert "dump of step 4 published" in run.output
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    assert sorted(p.name for p in ckpt.iterdir()) == ["iter_0000003", "iter_0000004",
                                                      "latest_checkpointed_iteration.txt"]
    assert_resumes_like_the_reference(ckpt, 4, reference_runs)


def test_both_holders_of_a_shard_killed_writes_nothing(tmp_path):
    ckpt = tmp_path / "ckpt"
    # dp4, R=2 on one host: instances [0, 1] and [2, 3]; shard 1 lives on ranks 1 and 3.
    run = faulty_run(tmp_path, "kill:rank=1,step=5;kill:rank=3,step=5", ckpt)
    assert run.returncode != 0
    assert "dump impossible, no complete replica: type 0 group 0 shard 1" in run.output
    assert not ckpt.exists() or not [p for p in ckpt.iterdir() if p.name.startswith("iter_")]


def test_survivors_of_the_controllers_host_say_why_and_end_without_sigkill(tmp_path):
    # Rank 0's process hosts the controller: when it dies nothing can be agreed on. torchrun sends the
    # others SIGTERM; each ends within its grace (30 s) with a line that says why, none is SIGKILLed.
    run = faulty_run(tmp_path, "kill:rank=0,step=5,phase=backward", tmp_path / "ckpt")
    assert run.returncode != 0
    for rank in (1, 2, 3):
        assert re.search(rf"rank {rank}\] ERROR step 5: the launcher asked this process to stop \(SIGTERM\) and "
                         rf"the controller has been unreachable for [\d.]+ s \(reconnecting\)\. Without the "
                         rf"controller no rank can be repaired and no dying-gasp checkpoint can be agreed on", run.output)
    assert "forcefully exiting via 9" not in run.output
    assert not (tmp_path / "ckpt").exists() or not list((tmp_path / "ckpt").iterdir())
    assert run.leftover == []
