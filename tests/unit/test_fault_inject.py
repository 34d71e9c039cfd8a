"""MINDIO_FAULT_INJECT: the grammar, its errors, and real faults fired in child processes."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mindio_adaptor.core.detection.fault_inject import (
    DEFAULT_MESSAGE, ENV_SPEC, ENV_STATE_DIR, Fault, FaultPlan, FaultSpecError, parse_spec, resolve_state_dir)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHILD_TIMEOUT = 60  # generous: the machine is shared; a healthy child takes well under a second


# ---------------------------------------------------------------- grammar

@pytest.mark.parametrize("spec,faults", [
    ("", ()),
    ("   ", ()),
    ("raise:rank=1,step=5", (Fault("raise", 1, 5),)),
    (" kill : rank = 0 , step = 3 , phase = optimizer ", (Fault("kill", 0, 3, "optimizer"),)),
    ("hang:step=7,rank=2,phase=backward;sigterm:rank=3,step=0",
     (Fault("hang", 2, 7, "backward"), Fault("sigterm", 3, 0))),
    ("raise:rank=0,step=1,msg=UCE ERROR", (Fault("raise", 0, 1, msg="UCE ERROR"),)),
    # only the first ':' separates the kind, so NCCL-like texts need no escape for their colons
    ("raise:rank=0,step=1,msg=ncclRemoteError: remote process exited",
     (Fault("raise", 0, 1, msg="ncclRemoteError: remote process exited"),)),
    (r"raise:rank=0,step=1,msg=a\,b\;c\=d\\e\:f", (Fault("raise", 0, 1, msg="a,b;c=d\\e:f"),)),
    ("raise:rank=0,step=1,phase=forward;raise:rank=0,step=1,phase=backward",
     (Fault("raise", 0, 1), Fault("raise", 0, 1, "backward"))),
    ("kill:rank=2,step=4,phase=save;kill:rank=3,step=8,phase=exit",
     (Fault("kill", 2, 4, "save"), Fault("kill", 3, 8, "exit"))),
])
def test_valid_specs_parse_to_faults(spec, faults):
    assert parse_spec(spec) == faults


@pytest.mark.parametrize("spec,message", [
    ("explode:rank=1,step=2", r"fault 1 'explode:rank=1,step=2': unknown kind 'explode'; known: raise, kill"),
    ("Raise:rank=1,step=2", "unknown kind 'Raise'"),
    ("raise", "missing ':' after the kind"),
    ("raise:step=2", "missing rank="),
    ("raise:rank=2", "missing step="),
    ("raise:rank=-1,step=2", "rank='-1' is not a non-negative integer"),
    ("raise:rank=1,step=-2", "step='-2' is not a non-negative integer"),
    ("raise:rank=x,step=2", "rank='x' is not a non-negative integer"),
    ("raise:rank=,step=2", "rank='' is not a non-negative integer"),
    ("raise:rank=1.5,step=2", "rank='1.5'"),
    ("raise:rank=1,step=2,when=now", "unknown key 'when'; known: rank, step, phase, msg"),
    ("raise:rank=1,rank=2,step=2", "key 'rank' given twice"),
    ("raise:rank=1,step=2,phase=loss", "unknown phase 'loss'; known: forward, backward, optimizer, completed, line, repair, save, written, exit"),
    ("raise:rank=1,step=2,msg=", "msg= is empty"),
    ("raise:rank=1,step=2,msg=   ", "msg= is empty"),
    ("kill:rank=1,step=2,msg=boom", "msg= is only for raise, not kill"),
    ("raise:rank=1,step=2;", r"fault 2: empty \(stray ';' \?\)"),
    (";raise:rank=1,step=2", "fault 1: empty"),
    ("raise:rank=1,,step=2", r"empty key=value item \(stray ',' \?\)"),
    ("raise:rank=1,step=2,", "empty key=value item"),
    ("raise:rank=1 step=2", "'rank=1 step=2' has more than one '='"),
    ("raise:rank=1,step=2,msg=a=b", r"has more than one '=' \(write \\= inside a value\)"),
    ("raise:rank=1,step", "'step' is not key=value"),
    ("raise:rank=1,step=2,msg=a,b", "'b' is not key=value"),
    ("raise:rank=1,step=2,msg=a;b", "fault 2 'b': missing ':'"),
    ("raise:rank=1,step=2,msg=oops\\", "trailing backslash"),
    (r"raise:rank=1,step=2,msg=a\nb", r"unknown escape '\\n'"),
    ("raise:rank=1,step=2;kill:rank=1,step=2", "rank 1 step 2 forward already has fault 1"),
    ("flip:rank=1,step=2", "flip changes the state at rest: give phase=completed"),
    ("flip:rank=1,step=2,phase=completed,seconds=1", "seconds= is only for slow, not flip"),
])
def test_malformed_specs_name_the_bad_part(spec, message):
    with pytest.raises(FaultSpecError, match=message):
        parse_spec(spec)


@pytest.mark.parametrize("fault", [
    Fault("raise", 0, 1), Fault("kill", 3, 9, "optimizer"), Fault("raise", 1, 2, "backward", msg="x,y;z=w\\v:u"),
])
def test_to_spec_round_trips(fault):
    assert parse_spec(fault.to_spec()) == (fault,)


def test_default_message_is_the_reference_unknown_text():
    assert Fault("raise", 0, 1).message == DEFAULT_MESSAGE == "Other ERROR"


# ---------------------------------------------------------------- state directory

def test_state_dir_order(tmp_path):
    env = {ENV_STATE_DIR: "/from/env", "TORCHELASTIC_RUN_ID": "abc", "SLURM_JOB_ID": "42"}
    assert resolve_state_dir(env, "/explicit") == "/explicit"
    assert resolve_state_dir(env) == "/from/env"
    del env[ENV_STATE_DIR]
    assert resolve_state_dir(env).endswith(os.path.join(f"mindio_fault_state-{os.getuid()}", "torchelastic_run_id-abc"))
    env["TORCHELASTIC_RUN_ID"] = "none"  # torchrun's shared default is no job identity
    assert resolve_state_dir(env).endswith("slurm_job_id-42")
    assert resolve_state_dir({"TORCHELASTIC_RUN_ID": "a/../b"}).endswith("torchelastic_run_id-a_.._b")


def test_faults_without_any_job_identity_refuse_to_start():
    with pytest.raises(FaultSpecError, match=f"set {ENV_STATE_DIR}"):
        FaultPlan.from_env({ENV_SPEC: "raise:rank=0,step=1", "TORCHELASTIC_RUN_ID": "none"})


def test_empty_plan_needs_no_state_dir_and_never_fires():
    plan = FaultPlan.from_env({})
    assert not plan and plan.faults == ()
    plan.maybe_fire(0, 1, "forward")


def test_from_env_reads_the_spec_and_creates_the_state_dir(tmp_path):
    state = tmp_path / "state"
    plan = FaultPlan.from_env({ENV_SPEC: "raise:rank=1,step=2", ENV_STATE_DIR: str(state)})
    assert plan.faults == (Fault("raise", 1, 2),) and state.is_dir()


def test_an_unusable_state_dir_is_refused_at_start(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(FaultSpecError, match="fault state directory .*file/state' is unusable"):
        FaultPlan.from_env({ENV_SPEC: "kill:rank=0,step=1", ENV_STATE_DIR: str(tmp_path / "file" / "state")})


def test_rank_outside_the_world_is_rejected(tmp_path):
    plan = FaultPlan(parse_spec("raise:rank=4,step=2"), str(tmp_path))
    plan.check_world_size(5)
    with pytest.raises(FaultSpecError, match=r"rank 4 does not exist \(world size 4\)"):
        plan.check_world_size(4)


# ---------------------------------------------------------------- firing in this process (raise only)

def test_raise_fires_only_at_its_point_and_once(tmp_path):
    plan = FaultPlan(parse_spec("raise:rank=1,step=5,phase=backward,msg=UCE ERROR"), str(tmp_path))
    for rank, step, phase in [(0, 5, "backward"), (1, 4, "backward"), (1, 5, "forward"), (1, 6, "backward")]:
        plan.maybe_fire(rank, step, phase)
    with pytest.raises(RuntimeError, match="^UCE ERROR$"):
        plan.maybe_fire(1, 5, "backward")
    assert (tmp_path / "raise-rank1-step5-backward.fired").exists()
    plan.maybe_fire(1, 5, "backward")  # the recompute of step 5: no second fault
    FaultPlan(plan.faults, str(tmp_path)).maybe_fire(1, 5, "backward")  # a resumed plan: still none


def test_unknown_phase_at_the_call_site_is_a_caller_bug(tmp_path):
    with pytest.raises(ValueError, match="unknown phase 'loss'"):
        FaultPlan().maybe_fire(0, 1, "loss")


# ---------------------------------------------------------------- real faults in child processes

CHILD = textwrap.dedent("""
    import sys, threading, time
    from mindio_adaptor.core.detection.fault_inject import FaultPlan
    beat_path = sys.argv[1]
    def beat():  # stands in for the heartbeat thread that must outlive a hang
        n = 0
        while True:
            n += 1
            with open(beat_path, "w") as f:
                f.write(str(n))
            time.sleep(0.05)
    threading.Thread(target=beat, daemon=True).start()
    plan = FaultPlan.from_env()
    for step in range(1, 4):
        for phase in ("forward", "backward", "optimizer"):
            plan.maybe_fire(1, step, phase)
    print("SURVIVED", flush=True)
""")


def _start_child(tmp_path, spec):
    env = dict(os.environ, **{ENV_SPEC: spec, ENV_STATE_DIR: str(tmp_path / "state"),
                              "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")})
    return subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "beat")], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run_child(tmp_path, spec):
    proc = _start_child(tmp_path, spec)
    out, err = proc.communicate(timeout=CHILD_TIMEOUT)
    return proc.returncode, out, err


def _wait_for(predicate, timeout=CHILD_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s")
        time.sleep(0.05)


@pytest.mark.parametrize("kind,returncode", [("kill", -signal.SIGKILL), ("sigterm", -signal.SIGTERM)])
def test_signal_faults_kill_the_child_and_leave_the_marker(tmp_path, kind, returncode):
    rc, out, err = _run_child(tmp_path, f"{kind}:rank=1,step=2,phase=backward")
    assert rc == returncode, err
    assert "SURVIVED" not in out
    assert (tmp_path / "state" / f"{kind}-rank1-step2-backward.fired").exists()
    assert f"fault injection: firing {kind} on rank 1 at step 2 (backward) at 20" in err


def test_raise_in_a_child_is_a_runtime_error_with_the_text(tmp_path):
    rc, out, err = _run_child(tmp_path, "raise:rank=1,step=3,phase=optimizer,msg=HBM MULTI BIT ECC\\, row 7")
    assert rc == 1 and "RuntimeError: HBM MULTI BIT ECC, row 7" in err


def test_a_second_process_of_the_same_job_does_not_fire_again(tmp_path):
    assert _run_child(tmp_path, "kill:rank=1,step=2")[0] == -signal.SIGKILL
    rc, out, err = _run_child(tmp_path, "kill:rank=1,step=2")  # the restarted rank
    assert rc == 0 and "SURVIVED" in out, err
    assert "already fired in this job" not in err  # INFO is below the default WARNING level: stays quiet


def test_hang_stops_progress_but_keeps_the_process_and_other_threads_alive(tmp_path):
    proc = _start_child(tmp_path, "hang:rank=1,step=1")
    try:
        _wait_for(lambda: (tmp_path / "state" / "hang-rank1-step1-forward.fired").exists())
        _wait_for(lambda: (tmp_path / "beat").exists())
        before = int((tmp_path / "beat").read_text() or 0)
        _wait_for(lambda: int((tmp_path / "beat").read_text() or 0) > before + 3)  # the heartbeat goes on
        assert proc.poll() is None
    finally:
        proc.kill()
        out, err = proc.communicate(timeout=CHILD_TIMEOUT)
    assert proc.returncode == -signal.SIGKILL and "SURVIVED" not in out


def test_slow_sleeps_at_every_step_from_its_own_and_says_so_once(tmp_path, caplog):
    [slow] = parse_spec("slow:rank=1,step=3,seconds=0.05")
    assert slow.to_spec() == "slow:rank=1,step=3,phase=forward,seconds=0.05"
    plan = FaultPlan((slow,), str(tmp_path))
    started = time.monotonic()
    for step in (1, 2):
        plan.maybe_fire(1, step)
    assert time.monotonic() - started < 0.05  # before its step: no sleep
    started = time.monotonic()
    for step in (3, 4, 5):
        plan.maybe_fire(1, step)
        plan.maybe_fire(0, step)  # another rank is never slowed
    assert time.monotonic() - started >= 0.15
    assert caplog.text.count("rank 1 is slow from step 3 on: 0.05 s more at each forward") == 1
    assert os.listdir(tmp_path) == []  # no once-per-job marker: it is a condition, not an event


@pytest.mark.parametrize("spec, message", [
    ("slow:rank=1,step=3", "seconds= is required for slow"),
    ("kill:rank=1,step=3,seconds=1", "seconds= is only for slow, not kill"),
    ("slow:rank=1,step=3,seconds=0", r"seconds=0 must be within \(0, 60\]"),
    ("slow:rank=1,step=3,seconds=1e9", r"seconds=1e9 must be within \(0, 60\]"),
    ("slow:rank=1,step=3,seconds=soon", "seconds='soon' is not a number"),
])
def test_slow_needs_a_sensible_sleep(spec, message):
    with pytest.raises(FaultSpecError, match=message):
        parse_spec(spec)


def test_a_flip_fires_once_on_the_shard_it_is_given(tmp_path):
    import torch

    plan = FaultPlan(parse_spec("flip:rank=1,step=5,phase=completed"), str(tmp_path))
    shard = [torch.zeros(3, dtype=torch.int64), torch.ones(9)]
    plan.maybe_fire(1, 5, "completed", lambda: shard)
    assert shard[1][4] == 1.5 and int((shard[1] != 1).sum()) == 1  # bit 22 of 1.0's mantissa: 1.5
    plan.maybe_fire(1, 5, "completed", lambda: shard)  # once per job
    assert shard[1][4] == 1.5
    with pytest.raises(FaultSpecError, match="no optimizer shard is at hand"):
        FaultPlan(parse_spec("flip:rank=0,step=1,phase=completed"), str(tmp_path / "b")).maybe_fire(0, 1, "completed")
