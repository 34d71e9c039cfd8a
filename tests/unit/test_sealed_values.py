"""core/job/sealed_values and the job's facts (core/job/job_store) on real TCPStores: a value written without the
job's token is told apart and never acted on (a forged pickle is never unpickled), a sealed value is valid
only under its own key and scope, a stranger's value never blocks the job's own compare-and-set, counters
pass through, and the launchers' token comes from the environment, a private file or a shared private file
on loopback, and is refused beyond loopback without one (launch/job_token)."""
import os
import pickle
import threading
import time
from datetime import timedelta

import pytest
from torch.distributed import TCPStore

from mindio_adaptor.core.job import job_store, paired_store
from mindio_adaptor.core.communication.comm import host_store
from mindio_adaptor.core.job.sealed_values import SealedStore, UnsealedValue, seal, unseal
from mindio_adaptor.launch.config import LaunchConfig, LaunchConfigError
from mindio_adaptor.launch.job_token import launcher_token

TOKEN = "t0k"


def sealed_store(scope="job", report=None):
    raw = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    return SealedStore(raw, TOKEN, scope, lambda key: key.endswith("/beat"), report)


def test_a_seal_holds_only_for_its_token_key_and_scope():
    sealed = seal(TOKEN, "job", "end", "the job ends")
    assert unseal(TOKEN, "job", "end", sealed) == b"the job ends"
    for token, scope, key in (("other", "job", "end"), (TOKEN, "job2", "end"), (TOKEN, "job", "node/1/done")):
        with pytest.raises(UnsealedValue):
            unseal(token, scope, key, sealed)
    with pytest.raises(UnsealedValue, match="'end' carries no seal"):
        unseal(TOKEN, "job", "end", b"the job ends")


def test_a_strangers_value_is_not_seen_and_is_reported_once():
    reports = []
    store = sealed_store(report=reports.append)
    store.raw.set("end", "forged")
    assert not store.check(["end"])
    with pytest.raises(UnsealedValue):
        store.get("end")
    assert [err.key for err in reports] == ["end"]  # once, however often it is looked at
    store.set("end", "by the job")
    assert store.check(["end"]) and store.get("end") == b"by the job"
    store.raw.set("end", "forged again")  # a stranger writes over a value this process saw sealed: it stands
    assert store.check(["end"]) and store.get("end") == b"by the job"


def test_a_strangers_value_never_blocks_the_jobs_compare_and_set():
    store = sealed_store()
    store.raw.set("controller/1", "10.0.0.9:1")  # planted before the launcher's compare-and-set from nothing
    assert store.compare_set("controller/1", "", "10.0.0.2:7000") == b"10.0.0.2:7000"
    assert store.compare_set("controller/1", "", "10.0.0.3:7000") == b"10.0.0.2:7000"  # a launcher's stays
    assert store.compare_set("generation", "", "0") == b"0"
    assert store.compare_set("generation", "0", "1") == b"1"


def test_counters_pass_through_and_wait_waits_for_a_sealed_value():
    store = sealed_store()
    assert store.add("node/1/beat", 1) == 1 and store.check(["node/1/beat"])
    store.raw.set("node/1/lifeline", "1:10.0.0.9:1")
    threading.Timer(0.3, lambda: store.set("node/1/lifeline", "1:127.0.0.1:5")).start()
    start = time.monotonic()
    store.wait(["node/1/lifeline"], timedelta(seconds=10))
    assert time.monotonic() - start >= 0.25 and store.get("node/1/lifeline") == b"1:127.0.0.1:5"
    store.raw.set("node/2/lifeline", "forged")
    with pytest.raises(TimeoutError, match="node/2/lifeline"):
        store.wait(["node/2/lifeline"], timedelta(seconds=0.3))


class _Planted:
    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_a_forged_fact_is_never_unpickled(tmp_path, monkeypatch):
    store = host_store(0, "127.0.0.1")
    monkeypatch.setenv(paired_store.ENV_STORES, f"127.0.0.1:{store.port}")
    monkeypatch.setenv("MINDIO_TOKEN", TOKEN)
    job_store.forget_connections()
    planted = _Planted()
    planted.path = str(tmp_path / "ran")
    store.set(job_store.PREFIX + "comm/last_epoch", pickle.dumps(planted))  # a stranger's pickle: code
    assert job_store.read_or("comm/last_epoch", 0) == 0
    assert job_store.read_at("127.0.0.1", store.port, "comm/last_epoch", TOKEN) is None
    assert not os.path.exists(planted.path)
    job_store.publish("comm/last_epoch", 4)
    assert job_store.read("comm/last_epoch", timeout_s=5) == 4
    monkeypatch.delenv("MINDIO_TOKEN")
    job_store.forget_connections()
    with pytest.raises(job_store.JobStoreError, match="MINDIO_TOKEN is not set"):
        job_store.read_or("comm/last_epoch", 0)
    job_store.forget_connections()


def config(master_addr, run_id="j"):
    return LaunchConfig(nnodes=2, nproc_per_node=1, node_rank=0, master_addr=master_addr, master_port=29500,
                        run_id=run_id, max_restarts=3, worker_reboot=True, worker_reboot_reason="",
                        monitor_interval=0.1, shutdown_timeout=5, rdzv_timeout=10, role="default")


def test_the_launchers_token_given_shared_on_this_host_or_refused(tmp_path):
    env = {"MINDIO_TOKEN_DIR": str(tmp_path / "tokens")}
    assert launcher_token(config("10.0.0.1"), "", {**env, "MINDIO_TOKEN": "given"}) == "given"
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    token_file.chmod(0o600)
    assert launcher_token(config("10.0.0.1"), str(token_file), env) == "from-file"
    token_file.chmod(0o644)
    with pytest.raises(LaunchConfigError, match=r"--token-file .*: mode 644.*chmod 600"):
        launcher_token(config("10.0.0.1"), str(token_file), env)
    with pytest.raises(LaunchConfigError, match="reachable beyond this machine.*set MINDIO_TOKEN"):
        launcher_token(config("10.0.0.1"), "", env)
    first = launcher_token(config("127.0.0.1"), "", env)  # every launcher on this host: one shared file
    assert launcher_token(config("127.0.0.1"), "", env) == first and len(first) == 32
    assert launcher_token(config("127.0.0.1", run_id="other"), "", env) != first
    assert oct(os.stat(tmp_path / "tokens").st_mode & 0o777) == "0o700"
    assert oct(os.stat(tmp_path / "tokens" / "job-j").st_mode & 0o777) == "0o600"
