import pytest

from mindio_adaptor.core.controller_address import ENV_CONTROLLER, controller_address


def test_no_external_controller_means_in_job():
    assert controller_address({}) is None
    assert controller_address({ENV_CONTROLLER: ""}) is None


def test_external_controller_address():
    assert controller_address({ENV_CONTROLLER: "10.0.0.5:9601"}) == ("10.0.0.5", 9601)
    assert controller_address({ENV_CONTROLLER: "ctl.example:1"}) == ("ctl.example", 1)


@pytest.mark.parametrize("value", ["ctl", "ctl:", ":9601", "ctl:port", "ctl:0", "ctl:65536", "ctl:-1"])
def test_bad_external_controller_address_names_the_variable(value):
    with pytest.raises(ValueError, match=f"{ENV_CONTROLLER}=.*expected host:port"):
        controller_address({ENV_CONTROLLER: value})
