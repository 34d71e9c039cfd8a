"""Issue 31: a job whose controller's link is mutual TLS 1.3 with the job's certificate (made by openssl), on
the real megatron.training (dp4, R=2, gloo, --enable-worker-reboot) under `mindio-adaptor launch`: the
launcher's controller, every processor and the launcher's report of a death speak TLS; rank 1 is killed
after step 3, replaced, repaired from its replica peer over the TLS-supervised recovery, and the run ends
with the uninterrupted run's losses and digest."""
import re
import sys
from pathlib import Path

import pytest

from mindio_adaptor.tiny.job import run_training

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tls_certificates import authority, tls_env  # noqa: E402

pytestmark = pytest.mark.e2e
REBOOT = ["--enable-high-availability", "--enable-worker-reboot"]
LAUNCH = ("mindio_adaptor.launch", "--max-restarts", "1")


def test_a_job_over_tls_recovers_and_ends_as_the_uninterrupted_one(tmp_path, reference_runs):
    env = {**tls_env(authority(tmp_path / "certificates", "job")),
           "MINDIO_FAULT_INJECT": "kill:rank=1,step=4", "MINDIO_FAULT_STATE_DIR": str(tmp_path / "faults")}
    run = run_training(REBOOT, env=env, launcher=LAUNCH).require_success()
    assert re.search(r"active controller started as pid \d+ on port \d+, its link TLS 1.3 with the job's certificate",
                     run.output)
    assert "told the recovery controller that pid" in run.output  # the launcher's report, over TLS
    assert "ranks [1] replaced, training resumes at step" in run.output
    reference, _ = reference_runs("ha")
    assert run.losses == reference.losses
    assert run.digest == reference.digest
