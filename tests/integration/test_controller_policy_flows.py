"""The controller consulting a fault policy, with real processor processes on localhost: the code a
rank reports with its memory error decides between online repair and dump; a policy that raises or
hangs leaves the built-in decision in force, logged with the rank."""
import json
import time

import pytest

from controller_harness import Job, actions_in_order

pytestmark = pytest.mark.integration

RESTART_REQUEST = "80C98000"
# These tests time decisions, not fault detection: a slow heartbeat keeps a loaded machine from
# declaring a busy worker dead.
HEARTBEAT_S = 1.0
WORLD_SIZE = 4
SEPARATE = "80CB8009"


@pytest.fixture
def fault_codes(tmp_path):
    path = tmp_path / "faultCode.json"
    path.write_text(json.dumps({"RestartRequestCodes": [RESTART_REQUEST], "SeparateNPUCodes": [SEPARATE]}))
    return str(path)


def start_job(tmp_path, **kwargs):
    """Four workers (DP [0,1,2,3], two replicas) under a controller with the given policy."""
    return Job(tmp_path, WORLD_SIZE, heartbeat_s=HEARTBEAT_S, **kwargs)


def details(job, kind):
    return [d for _, _, d in job.controller_events(kind)]


def assert_online_repair(job, src, dst):
    results = job.wait_results(range(WORLD_SIZE))
    assert all(r["result"] == "done" and r["repair_type"] == "retry" for r in results.values()), results
    assert actions_in_order(job) == ["prelock", "stop", "clean", "repair", "rollback", "normal"]
    assert details(job, "repair_plan") == [f"type 0 src=[{src}] dst=[{dst}]"]
    assert details(job, "state")[-1] == "REPAIR->NORMAL"


def run(job, check):
    try:
        job.wait_ready()
        job.fire()
        check()
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_restart_request_code_keeps_the_online_repair(tmp_path, job_env, fault_codes):
    job = start_job(tmp_path, policy=(fault_codes, None), fail_rank=3, fail_code=RESTART_REQUEST)

    def check():
        assert_online_repair(job, src=1, dst=3)
        assert details(job, "policy") == [f"rank 3 code {RESTART_REQUEST} -> retry"]
        assert details(job, "policy_decision") == ["builtin retry, policy retry -> retry"]
    run(job, check)


def test_shipped_restart_business_code_keeps_the_online_repair(tmp_path, job_env):
    job = start_job(tmp_path, policy=(None, None), fail_rank=1, fail_code="80E01801")

    def check():
        assert_online_repair(job, src=3, dst=1)
        assert details(job, "policy") == ["rank 1 code 80E01801 -> retry"]
    run(job, check)


def test_separate_npu_code_turns_the_repair_into_a_dump(tmp_path, job_env, fault_codes):
    job = start_job(tmp_path, policy=(fault_codes, None), fail_rank=1, fail_code=SEPARATE)

    def check():
        results = job.wait_results(range(WORLD_SIZE))
        assert all(r["result"] == "exit" for r in results.values()), results
        assert details(job, "policy") == [f"rank 1 code {SEPARATE} -> recover"]
        # ARF (recover) is not enabled, so the next more drastic strategy applies.
        assert details(job, "policy_decision") == ["builtin retry, policy recover -> dump"]
        assert actions_in_order(job) == ["prelock", "stop", "save_ckpt", "rename", "exit"]
        # DP [0,1,2,3], R=2, rank 1 not trusted: its shard is saved by its replica peer 3.
        assert details(job, "savers") == ["type 0 step 5 [0,3]"]
        assert [r for r in range(WORLD_SIZE) if job.handler_calls(r, "save_ckpt")] == [0, 3]
        assert job.handler_calls(3, "save_ckpt") == [[5, [{"type": 0, "ranks": [0, 3]}]]]
        assert job.handler_calls(0, "rename") == [[5]]
        assert all(not job.handler_calls(r, "repair") for r in range(WORLD_SIZE))
        assert details(job, "state")[-2:] == ["ABNORMAL->DUMP", "DUMP->EXIT"]
    run(job, check)


def test_a_policy_that_raises_leaves_the_builtin_decision_and_is_logged(tmp_path, job_env, capfd):
    def broken(rank, report_state, code):
        raise KeyError(f"no rule for {code}")

    job = start_job(tmp_path, policy=broken, fail_rank=2, fail_code=SEPARATE)

    def check():
        assert_online_repair(job, src=0, dst=2)
        errors = details(job, "policy_error")
        assert len(errors) == 1 and errors[0].startswith(f"rank 2 code {SEPARATE}: KeyError:"), errors
        assert "no rule for" in errors[0]
        assert not details(job, "policy_decision")
        log = capfd.readouterr().err
        assert f"fault policy failed for rank 2 code {SEPARATE}" in log and "using the built-in decision" in log
    run(job, check)


def test_a_slow_policy_is_abandoned_after_its_time_limit(tmp_path, job_env, capfd):
    def slow(rank, report_state, code):
        time.sleep(3)
        return "exit"

    job = start_job(tmp_path, policy=slow, policy_timeout_s=0.3, fail_rank=2, fail_code=SEPARATE)

    def check():
        started = time.monotonic()
        assert_online_repair(job, src=0, dst=2)
        assert time.monotonic() - started < 3, "the controller waited for the slow policy"
        assert details(job, "policy_error") == [f"rank 2 code {SEPARATE}: no answer within 300 ms"]
        assert "fault policy failed for rank 2" in capfd.readouterr().err
    run(job, check)


def test_a_report_without_code_does_not_consult_the_policy(tmp_path, job_env):
    calls = []

    def record(rank, report_state, code):
        calls.append((rank, report_state, code))
        return "exit"

    job = start_job(tmp_path, policy=record, fail_rank=2)

    def check():
        assert_online_repair(job, src=0, dst=2)
        assert calls == [] and not details(job, "policy")
    run(job, check)
