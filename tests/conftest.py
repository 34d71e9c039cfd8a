"""For every test: nothing the tests' jobs do is remembered outside the test session, and no process of the session
imports torch's compiler for Megatron's fusions."""
import os

import pytest

from mindio_adaptor.core.detection.offender_record import FILE_ENV

# The table of what each test module cost (tests/suite_cost.py). By its bare name: pytest puts tests/ (no __init__.py)
# on sys.path to import this conftest, as the tests' own `from megatron_releases import` relies on.
pytest_plugins = ["suite_cost"]

# Megatron wraps its fusions in torch.compile at import; with this set, patch_all() hands them back unchanged without
# importing torch's compiler (core/process/compile_switch), about 3 CPU-seconds of each process that imports Megatron,
# this one included. Tiny jobs set it anyway (tiny/job.JOB_ENV); test_compile_switch sets it both ways itself.
os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")


@pytest.fixture(scope="session", autouse=True)
def offender_record_of_the_session(tmp_path_factory):
    """The launcher-hosted controllers keep a record of the nodes that caused faults (core/detection/offender_record),
    by default in the user's home: the tests' lost nodes and killed ranks go to a file of the session."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(FILE_ENV, str(tmp_path_factory.mktemp("offenders") / "offenders.json"))
        yield
