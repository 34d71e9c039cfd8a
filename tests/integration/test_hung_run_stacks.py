"""tiny_job.run_training on a run that never ends: it is killed at its timeout, and the error names a file
with the run's output and, where py-spy is installed (scripts/install_env.sh installs it), every process's
stacks taken before the kill; the error carries the stacks too."""
import re
import shutil
from pathlib import Path

import pytest

from mindio_adaptor.tiny.job import run_training


def test_a_hung_run_leaves_its_processes_stacks(tmp_path):
    script = tmp_path / "hangs.py"
    script.write_text("import time\nprint('started', flush=True)\n\ndef wait_forever():\n    time.sleep(3600)\n\n"
                      "wait_forever()\n")
    with pytest.raises(AssertionError, match="did not finish within 20 s") as failed:
        run_training([], nproc=1, timeout=20, script=str(script))
    report = Path(re.search(r"every process's stacks in (\S+);", str(failed.value)).group(1))
    text = report.read_text()
    assert "started" in text
    if shutil.which("py-spy"):
        assert "wait_forever (hangs.py:5)" in text, text[-3000:]
        assert "wait_forever (hangs.py:5)" in str(failed.value)  # the error itself carries them (a CI log)
    else:
        assert "py-spy is not installed" in text
    report.unlink()
