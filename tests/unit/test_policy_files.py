"""Reading the two files from disk: unusable files fail with the file and the problem named, the
shipped defaults are the reference's, and load_policy logs each ignored item once."""
import json
import logging

import pytest

from mindio_adaptor.core.policy.config import load_policy, read_json, read_policy
from mindio_adaptor.core.policy.levels import Level
from mindio_adaptor.core.policy.rules import PolicyFileError


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


UNUSABLE = [
    (None, "no such file"),
    (b"{\"GraceTolerance\": ", "not valid JSON"),
    (b"", "not valid JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    ("DIR", "not a regular file"),
]


@pytest.mark.parametrize("content, problem", UNUSABLE)
def test_unusable_file_names_file_and_problem(tmp_path, content, problem):
    if content is None:
        path = str(tmp_path / "missing.json")
    elif content == "DIR":
        path = str(tmp_path)
    else:
        path = write(tmp_path, "bad.json", content)
    with pytest.raises(PolicyFileError) as error:
        read_json(path)
    assert error.value.path == path and problem in str(error.value) and path in str(error.value)


def test_json_error_says_where(tmp_path):
    path = write(tmp_path, "bad.json", '{\n  "FaultFrequency": [,]\n}')
    with pytest.raises(PolicyFileError, match="line 2 column"):
        read_json(path)


def test_read_policy_rejects_a_customization_that_is_a_list(tmp_path):
    path = write(tmp_path, "faultCustomization.json", "[]")
    with pytest.raises(PolicyFileError, match="faultCustomization.json"):
        read_policy(customization_path=path)


def test_shipped_defaults_are_the_reference_rules():
    config = read_policy()
    assert config.issues == ()
    frequency, duration = config.customization.frequency, config.customization.duration
    manual = [code for code, rule in frequency.items()
              if (rule.times, rule.time_window, rule.handling, rule.release_time_window)
              == (2, 86400, Level.ManuallySeparateNPU, None)]
    assert len(manual) == 41
    assert (frequency["80E18005"].times, frequency["80E18005"].time_window) == (3, 86400)
    network = frequency["81078603"]
    assert (network.times, network.time_window, network.release_time_window) == (5, 86400, 172800)
    assert (duration["81078603"].fault_timeout, duration["81078603"].recover_timeout,
            duration["81078603"].handling) == (20, 60, Level.PreSeparateNPU)
    assert config.levels["80E01801"] is Level.RestartBusiness
    assert config.customization.grace.wait_device_reset_time == 150


def test_load_policy_logs_each_ignored_item_once(tmp_path, caplog):
    path = write(tmp_path, "custom.json", json.dumps({"GraceTolerance": {"WaitDeviceResetTime": 500}}))
    with caplog.at_level(logging.WARNING, logger="mindio_adaptor.core.policy"):
        config = load_policy(customization_path=path)
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(config.issues) == 1
    assert warnings == [f"fault policy: {path}: GraceTolerance.WaitDeviceResetTime: 500 is outside "
                        f"60..180; ignored, default 150 used"]
