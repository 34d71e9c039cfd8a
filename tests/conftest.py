"""For every test: nothing the tests' jobs do is remembered outside the test session."""
import pytest

from mindio_adaptor.core.detection.offender_record import FILE_ENV


@pytest.fixture(scope="session", autouse=True)
def offender_record_of_the_session(tmp_path_factory):
    """The launcher-hosted controllers keep a record of the nodes that caused faults (core/detection/offender_record),
    by default in the user's home: the tests' lost nodes and killed ranks go to a file of the session."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(FILE_ENV, str(tmp_path_factory.mktemp("offenders") / "offenders.json"))
        yield
