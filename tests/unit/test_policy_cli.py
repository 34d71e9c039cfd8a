"""`mindio-adaptor policy check` and `policy explain`: output, ignored items, exit codes."""
import json
import subprocess
import sys

import pytest

from mindio_adaptor.cli import main
from mindio_adaptor.core.policy.config import CUSTOMIZATION_FILE, FAULT_CODE_FILE, default_path


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def run(capsys, *argv):
    code = main(["policy", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_shipped_files(capsys):
    code, out, err = run(capsys, "check", default_path(FAULT_CODE_FILE), default_path(CUSTOMIZATION_FILE))
    assert (code, err) == (0, "")
    assert "80E01801   RestartBusiness" in out
    assert "FaultFrequency 80E18005   3 in 86400 s -> ManuallySeparateNPU  [FaultFrequency[1]]" in out
    assert ("FaultFrequency 81078603   5 in 86400 s -> ManuallySeparateNPU, released after 172800 s "
            "without the fault; counts only faults that timed out (FaultDuration too)") in out
    assert ("FaultDuration  81078603   FaultTimeout 20 s, RecoverTimeout 60 s -> PreSeparateNPU"
            in out)
    assert "WaitDeviceResetTime 150 s" in out
    assert out.count("ignored items: 0") == 2


def test_check_prints_ignored_items_and_strict_fails(tmp_path, capsys):
    path = write(tmp_path, "mine.json", {"FaultFrequency": [
        {"EventId": ["80E18005"], "TimeWindow": 30, "Times": 3, "FaultHandling": "SeparateNPU"}]})
    code, out, _ = run(capsys, "check", path)
    assert code == 0
    assert "ignored FaultFrequency[0].TimeWindow: 30 is outside 60..864000; rule ignored" in out
    assert run(capsys, "check", "--strict", path)[0] == 1


UNUSABLE = [
    ("missing.json", None, "no such file"),
    ("broken.json", '{"GraceTolerance": {', "not valid JSON"),
    ("list.json", "[1, 2]", "neither a faultCode.json"),
    ("faultCustomization.json", "[1, 2]", "expected a JSON object"),
    ("other.json", "{}", "neither a faultCode.json"),
]


@pytest.mark.parametrize("name, content, problem", UNUSABLE)
def test_check_unusable_file_exits_1_naming_file_and_problem(tmp_path, capsys, name, content, problem):
    path = str(tmp_path / name) if content is None else write(tmp_path, name, content)
    code, out, err = run(capsys, "check", path)
    assert code == 1
    assert path in err and problem in err


def test_check_goes_on_after_an_unusable_file(tmp_path, capsys):
    code, out, err = run(capsys, "check", str(tmp_path / "nope.json"), default_path(FAULT_CODE_FILE))
    assert code == 1 and "nope.json" in err and "80E01801" in out


def test_check_tells_files_apart_by_name_when_empty(tmp_path, capsys):
    code, out, _ = run(capsys, "check", write(tmp_path, "faultCode.json", "{}"),
                       write(tmp_path, "my-faultCustomization.json", "{}"))
    assert code == 0 and "faultCode.json, 0 codes" in out and "0 FaultFrequency codes" in out


EVENTS = [
    {"time": 0, "code": "81078603", "device": 0, "kind": "occur"},
    {"time": 30, "code": "81078603", "device": 0, "kind": "recover"},
    {"time": 40, "code": "80E01801", "rank": 1, "kind": "occur"},
    {"time": 41, "code": "ABCD0001", "device": 2, "kind": "occur", "severity": "minor"},
    {"time": 50, "device": 1, "kind": "clear"},
]


def event_log(tmp_path, events=EVENTS, extra=""):
    return write(tmp_path, "events.jsonl", "# a comment\n\n" + "\n".join(json.dumps(e) for e in events)
                 + "\n" + extra)


def test_explain_prints_a_decision_per_event_and_timer(tmp_path, capsys):
    code, out, err = run(capsys, "explain", "--events", event_log(tmp_path), "--until", "1000")
    assert (code, err) == (0, "")
    lines = [line for line in out.splitlines() if line.startswith("t=")]
    kinds = [line.split()[4] for line in lines]
    assert kinds == ["occur", "timeout", "recover", "occur", "occur", "clear", "recovered"]
    assert "PreSeparateNPU      pre-separated      none" in lines[1]
    assert "RestartBusiness     none               retry" in lines[3]
    assert "unknown code, severity minor -> NotHandleFault" in lines[4]
    assert out.splitlines()[-1] == "# 5 events replayed up to t=1000; isolated: none"


def test_explain_json_and_strategy_options(tmp_path, capsys):
    code, out, _ = run(capsys, "explain", "--events", event_log(tmp_path), "--json", "--enabled", "dump")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(records) == 6
    assert records[3]["code"] == "80E01801" and records[3]["strategy"] == "dump"


def test_explain_with_custom_configs(tmp_path, capsys):
    codes = write(tmp_path, "codes.json", {"SeparateNPUCodes": ["80E01801"]})
    custom = write(tmp_path, "custom.json", {"FaultFrequency": [
        {"EventId": ["80E01801"], "TimeWindow": 60, "Times": 1, "FaultHandling": "ManuallySeparateNPU"}],
        "GraceTolerance": {"WaitDeviceResetTime": 1}})
    code, out, err = run(capsys, "explain", "--events", event_log(tmp_path), "--fault-code", codes,
                         "--customization", custom)
    assert code == 0
    assert "warning" in err and "GraceTolerance.WaitDeviceResetTime" in err
    assert "ManuallySeparateNPU manually-separated recover" in out
    # the operator cleared the sticky state; the fault itself is still there
    assert out.splitlines()[-1].endswith("isolated: device 1 separated")


BAD_LOGS = [
    ('{"time": 5, "code": "80E01801", "device": 0, "kind": "occur"}\n'
     '{"time": 4, "code": "80E01801", "device": 0, "kind": "recover"}', "line 2", "time order"),
    ('{"time": 5, "code": "80E01801", "device": 0, "kind": "boom"}', "line 1", "kind must be"),
    ('{"time": 5, "code": "80E01801", "kind": "occur"}', "line 1", "device (or rank)"),
    ('{"time": "5", "code": "80E01801", "device": 0, "kind": "occur"}', "line 1", "time must be"),
    ('{"time": 5, "device": 0, "kind": "occur"}', "line 1", "code must be"),
    ('not json', "line 1", "Expecting value"),
]


@pytest.mark.parametrize("content, line, problem", BAD_LOGS)
def test_explain_bad_event_log(tmp_path, capsys, content, line, problem):
    path = write(tmp_path, "events.jsonl", content)
    code, _, err = run(capsys, "explain", "--events", path)
    assert code == 1 and f"{path} {line}" in err and problem in err


def test_explain_missing_files(tmp_path, capsys):
    code, _, err = run(capsys, "explain", "--events", str(tmp_path / "none.jsonl"))
    assert code == 1 and "none.jsonl: no such file" in err
    code, _, err = run(capsys, "explain", "--events", event_log(tmp_path), "--fault-code",
                       str(tmp_path / "codes.json"))
    assert code == 1 and "codes.json: no such file" in err


def test_policy_without_action_prints_usage(capsys):
    code, _, err = run(capsys)
    assert code == 2 and "check" in err and "explain" in err


def test_module_entry_point_in_a_subprocess():
    result = subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", "policy", "check",
                             default_path(FAULT_CODE_FILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "RestartBusiness" in result.stdout


def test_explain_prints_epoch_times_in_full(tmp_path, capsys):
    path = write(tmp_path, "events.jsonl", json.dumps(
        {"time": 1700000000.25, "code": "80E01801", "device": 0, "kind": "occur"}))
    code, out, _ = run(capsys, "explain", "--events", path)
    assert code == 0 and "t=1700000000.25 " in out and "e+09" not in out
