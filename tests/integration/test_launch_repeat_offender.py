"""`mindio-adaptor launch --repeat-offenders`: a node the offender record names a repeat offender is warned
about and runs (warn, the default), or its launcher refuses to start before any worker (refuse)."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mindio_adaptor.core.detection.offender_record import FILE_ENV, Incident, OffenderRecord

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def launch(tmp_path, policy, node):
    record = OffenderRecord(tmp_path / "offenders.json")
    for ago in (300, 200, 100):
        record.note(Incident(time.time() - ago, "vm-bad", 1, "node fault"))
    ran = tmp_path / f"ran-{node}"
    env = dict(os.environ, PYTHONPATH=str(REPO), MINDIO_FAILURE_DOMAIN=node, **{FILE_ENV: str(record.path)})
    argv = [sys.executable, "-m", "mindio_adaptor.launch", "--standalone", "--nproc-per-node", "1",
            "--no-python", "touch", str(ran)]
    if policy:
        argv[3:3] = ["--repeat-offenders", policy]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90)
    return done, ran.exists()


def test_a_repeat_offender_refuses_to_start_when_asked(tmp_path):
    done, ran = launch(tmp_path, "refuse", "vm-bad")
    assert done.returncode == 1 and not ran
    assert ("error: node vm-bad is a repeat offender: 3 incidents within 24 h (node fault of rank 1 at " in done.stderr
            and "this launcher refuses to start (--repeat-offenders refuse); return the node to service with "
                "`mindio-adaptor offenders --forget vm-bad`" in done.stderr), done.stderr


def test_a_repeat_offender_is_warned_about_and_runs_by_default(tmp_path):
    done, ran = launch(tmp_path, None, "vm-bad")
    assert done.returncode == 0 and ran, done.stderr
    assert "warning: node vm-bad is a repeat offender: 3 incidents" in done.stderr
    assert "it runs (--repeat-offenders warn)" in done.stderr


def test_another_node_starts_without_a_word(tmp_path):
    done, ran = launch(tmp_path, "refuse", "vm-good")
    assert done.returncode == 0 and ran, done.stderr
    assert "repeat offender" not in done.stderr
