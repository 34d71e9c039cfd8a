import pytest

from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER
from mindio_adaptor.core.job import processor_link
from mindio_adaptor.core.job.controller_address import ENV_CONTROLLER, controller_address, controller_addresses
from mindio_adaptor.core.job.paired_store import ENV_STORES, control_ports
from mindio_adaptor.patches.controller_link import start_or_end_with_the_job


def test_no_external_controller_means_in_job():
    assert controller_address({}) is None
    assert controller_address({ENV_CONTROLLER: ""}) is None


def test_external_controller_address():
    assert controller_address({ENV_CONTROLLER: "10.0.0.5:9601"}) == ("10.0.0.5", 9601)
    assert controller_address({ENV_CONTROLLER: "ctl.example:1"}) == ("ctl.example", 1)


def test_backup_controllers_follow_the_active_one_in_takeover_order():
    value = "a.example:9601, b.example:9602,c:9603"
    assert controller_addresses({ENV_CONTROLLER: value}) == [("a.example", 9601), ("b.example", 9602), ("c", 9603)]
    assert controller_address({ENV_CONTROLLER: value}) == ("a.example", 9601)
    assert controller_addresses({}) is None


@pytest.mark.parametrize("value", ["ctl", "ctl:", ":9601", "ctl:port", "ctl:0", "ctl:65536", "ctl:-1", "a:1,",
                                   "a:1,b"])
def test_bad_external_controller_address_names_the_variable(value):
    with pytest.raises(ValueError, match=f"{ENV_CONTROLLER}=.*expected host:port"):
        controller_address({ENV_CONTROLLER: value})


def test_a_stop_keeps_every_store_and_every_controller_of_the_lists():
    """A backup (and the store beside it) may lead the job when a stop comes: its connection is not a
    collective's."""
    env = {"MASTER_PORT": "29500", ENV_CONTROLLER: "a:9601,b:9602,c:9603"}
    assert control_ports(env) == {29500, 9601, 9602, 9603}
    assert control_ports({**env, ENV_STORES: "a:29500,b:29600"}) == {29500, 29600, 9601, 9602, 9603}
    assert control_ports({"MASTER_PORT": "29500"}, also=[4242]) == {29500, 4242}  # the in-job controller
    assert control_ports({}) == set()


# A restarted process refused because the controller ends the job ends with the job's code; any other
# refusal is raised as before.

class RefusedLink:
    def __init__(self, error):
        self.error, self.started = error, []

    def start(self, host, port, backups=()):
        self.started.append((host, port, tuple(backups)))
        raise self.error


def test_a_refusal_as_the_job_ends_exits_with_the_job_s_code(caplog):
    link = RefusedLink(processor_link.JobEnding("rank 5: the controller refused registration: ... in state DUMP"))
    with pytest.raises(SystemExit) as ended:
        start_or_end_with_the_job(link, ("127.0.0.1", 4242), [("127.0.0.1", 4343)])
    assert ended.value.code == ENDED_BY_CONTROLLER
    assert link.started == [("127.0.0.1", 4242, (("127.0.0.1", 4343),))]
    assert "in state DUMP; exiting with code 86 (ENDED_BY_CONTROLLER)" in caplog.text


def test_any_other_refusal_is_raised():
    with pytest.raises(ValueError, match="wrong token") as raised:
        start_or_end_with_the_job(RefusedLink(ValueError("wrong token")), ("127.0.0.1", 4242), [])
    assert not isinstance(raised.value, processor_link.JobEnding)
    assert issubclass(processor_link.JobEnding, ValueError)
