"""The controller's use of the fault policy: the rule that combines the built-in decision with the
policy's answer (the C++ function the controller runs), the FaultPolicy callable over the policy
engine, and the checks on what users pass."""
import json

import pytest

from mindio_adaptor import _native as nat
from mindio_adaptor.core.policy import PolicyEngine, read_policy
from mindio_adaptor.core.policy.config import empty_policy
from mindio_adaptor.ttp import controller as ctl
from mindio_adaptor.core.job import processor_link
from mindio_adaptor.ttp import processor as tp
from mindio_adaptor.ttp.exception_handler import fault_code_of
from mindio_adaptor.ttp.fault_policy import FaultPolicy, check_timeout, make_policy


def combine(kinds, policy, retry=True, recover=False, during_repair=False, repairable=True, dump_possible=True):
    return nat.combine_with_policy(kinds, policy, retry, recover, during_repair, repairable, dump_possible)


# (fault kinds, policy answer, capabilities/state, built-in decision, combined decision)
COMBINATIONS = [
    # A milder or equal answer never changes the built-in decision.
    (["memory"], "none", {}, "retry", "retry"),
    (["memory"], "retry", {}, "retry", "retry"),
    (["node"], "retry", {}, "dump", "dump"),  # a dead process still cannot be retried
    (["node"], "none", {"dump_possible": False}, "exit", "exit"),
    (["unknown"], "retry", {}, "dump", "dump"),
    (["memory"], "retry", {"during_repair": True}, "dump", "dump"),
    (["node"], "recover", {"recover": True}, "recover", "recover"),
    # A more drastic answer is taken when it can be carried out...
    (["memory"], "recover", {"recover": True}, "retry", "recover"),
    (["memory"], "dump", {}, "retry", "dump"),
    (["memory"], "exit", {}, "retry", "exit"),
    (["communication"], "dump", {}, "retry", "dump"),
    (["node"], "exit", {}, "dump", "exit"),
    # ...else the next more drastic one that can: SeparateNPU's recover without ARF is a dump.
    (["memory"], "recover", {}, "retry", "dump"),
    (["memory"], "recover", {"recover": True, "repairable": False}, "dump", "dump"),
    (["memory"], "recover", {"dump_possible": False}, "retry", "exit"),
    (["memory"], "dump", {"dump_possible": False}, "retry", "exit"),
    (["memory"], "recover", {"retry": False}, "dump", "dump"),
]


@pytest.mark.parametrize("kinds,policy,state,builtin,combined", COMBINATIONS)
def test_policy_can_only_make_the_decision_more_drastic(kinds, policy, state, builtin, combined):
    assert combine(kinds, policy, **state) == (builtin, combined)


def test_combined_decision_is_never_milder_than_the_builtin_one():
    order = ["none", "retry", "recover", "dump", "exit"]
    kinds_choices = [["memory"], ["communication"], ["node"], ["unknown"], ["memory", "node"]]
    for kinds in kinds_choices:
        for policy in order:
            for bits in range(32):
                flags = dict(zip(["retry", "recover", "during_repair", "repairable", "dump_possible"],
                                 [bool(bits >> i & 1) for i in range(5)]))
                builtin, combined = combine(kinds, policy, **flags)
                assert order.index(combined) >= max(order.index(builtin), 1), (kinds, policy, flags)
                if order.index(policy) > order.index(builtin):
                    assert order.index(combined) >= order.index(policy), (kinds, policy, flags)


def test_combination_refuses_an_unknown_strategy():
    with pytest.raises(ValueError, match="unknown strategy 'reboot'"):
        combine(["memory"], "reboot")


def write_codes(tmp_path, **levels):
    path = tmp_path / "faultCode.json"
    path.write_text(json.dumps({f"{level}Codes": codes for level, codes in levels.items()}))
    return str(path)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("codes,code,expected", [
    ({"RestartRequest": ["80C98000"]}, "80C98000", "retry"),
    ({"RestartRequest": ["80C98000"]}, "80c98000", "retry"),  # codes compare case-insensitively
    ({"SeparateNPU": ["80CB8009"]}, "80CB8009", "recover"),
    ({"RestartNPU": ["80CB8009"]}, "80CB8009", "recover"),
    ({"NotHandleFault": ["80CB8009"]}, "80CB8009", "none"),
    ({}, "DEADBEEF", "recover"),  # an unknown code with no severity is SeparateNPU (reference rule)
])
def test_fault_policy_maps_the_code_level_to_a_strategy(tmp_path, codes, code, expected):
    policy = make_policy((write_codes(tmp_path, **codes), None))
    assert policy(3, 2, code) == expected


def test_fault_policy_escalates_with_frequency_and_feeds_monotonic_time(tmp_path):
    codes = tmp_path / "faultCode.json"
    codes.write_text(json.dumps({"RestartRequestCodes": ["80C98000"]}))
    custom = tmp_path / "faultCustomization.json"
    custom.write_text(json.dumps({"FaultFrequency": [{"EventId": ["80C98000"], "TimeWindow": 60, "Times": 2,
                                                      "FaultHandling": "ManuallySeparateNPU"}]}))
    clock = Clock()
    policy = FaultPolicy(PolicyEngine(read_policy(str(codes), str(custom))), clock=clock)
    assert policy(1, 2, "80C98000") == "retry"
    clock.now += 10
    assert policy(1, 2, "80C98000") == "recover"  # second in the window: ManuallySeparateNPU
    assert policy(2, 2, "80C98000") == "retry"  # counts are per device


def test_fault_policy_keeps_an_isolated_device_isolated(tmp_path):
    codes = tmp_path / "faultCode.json"
    codes.write_text(json.dumps({"RestartRequestCodes": ["80C98000", "80C98001"]}))
    custom = tmp_path / "faultCustomization.json"
    custom.write_text(json.dumps({"FaultFrequency": [{"EventId": ["80C98000"], "TimeWindow": 60, "Times": 1,
                                                      "FaultHandling": "ManuallySeparateNPU"}]}))
    policy = FaultPolicy(PolicyEngine(read_policy(str(codes), str(custom))), clock=Clock())
    assert policy(0, 2, "80C98000") == "recover"
    # Another, mild code on the sticky-isolated device must not be retried there.
    assert policy(0, 2, "80C98001") == "recover"
    assert policy(1, 2, "80C98001") == "retry"


def test_sub_healthy_strategy_applies_to_sub_health_codes(tmp_path):
    path = write_codes(tmp_path, SubHealthFault=["80E18005"])
    assert make_policy((path, None))(0, 2, "80E18005") == "none"
    assert make_policy((path, None), "graceExit")(0, 2, "80E18005") == "dump"
    assert make_policy((path, None), "forceExit")(0, 2, "80E18005") == "exit"


def test_make_policy_accepts_engines_configs_paths_and_callables(tmp_path):
    assert make_policy(None) is None
    assert isinstance(make_policy(PolicyEngine(empty_policy())), FaultPolicy)
    assert isinstance(make_policy(empty_policy()), FaultPolicy)
    path = write_codes(tmp_path, RestartBusiness=["80E01801"])
    assert make_policy(path)(0, 2, "80E01801") == "retry"
    assert make_policy([None, None])(0, 2, "80E01801") == "retry"  # the shipped files

    def mine(rank, state, code):
        return "dump"
    assert make_policy(mine) is mine


@pytest.mark.parametrize("given,error,message", [
    (42, TypeError, "policy must be None, a PolicyEngine, a PolicyConfig, a path, a pair of paths or a callable"),
    (("a", "b", "c"), ValueError, "must be \\(faultCode.json, faultCustomization.json\\), got 3 items"),
])
def test_make_policy_refuses_what_it_cannot_use(given, error, message):
    with pytest.raises(error, match=message):
        make_policy(given)


def test_a_missing_policy_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        make_policy(str(tmp_path / "missing.json"))


def test_bad_sub_healthy_strategy_and_timeout_are_refused():
    with pytest.raises(ValueError, match="sub_healthy_strategy 'later' is not one of ignore, hotSwitch, graceExit, forceExit"):
        make_policy(empty_policy(), "later")
    for bad in (0, -1, 601, True, "5"):
        with pytest.raises(ValueError, match="policy timeout_s must be a number of seconds in 0.01..600"):
            check_timeout(bad)
    assert check_timeout(5) == 5.0


def test_set_fault_policy_needs_a_controller_and_checks_its_arguments():
    ctl.tft_destroy_controller()
    with pytest.raises(RuntimeError, match="no controller"):
        ctl.tft_set_fault_policy(None)
    ctl.tft_init_controller(-1, 2, fault_policy=empty_policy())
    try:
        ctl.tft_set_fault_policy(lambda rank, state, code: "dump", timeout_s=0.5)
        ctl.tft_set_fault_policy(None)
        with pytest.raises(ValueError, match="policy timeout_s"):
            ctl.tft_set_fault_policy(None, timeout_s=1000)
    finally:
        ctl.tft_destroy_controller()


def test_native_set_policy_refuses_non_callables_and_bad_timeouts():
    controller = nat.Controller(-1, 2)
    with pytest.raises(TypeError, match="policy must be callable or None"):
        controller.set_policy(3)
    with pytest.raises(ValueError, match="policy timeout 0 ms is out of range 10..600000"):
        controller.set_policy(None, 0.0)


def test_report_error_refuses_bad_codes_before_sending():
    processor = nat.Processor(0, 1)
    with pytest.raises(ValueError, match="error_code 65 bytes exceed the limit of 64"):
        processor.report_error(2, "x" * 65)
    with pytest.raises(ValueError, match="not printable ASCII"):
        processor.report_error(2, "80E0\t1801")
    with pytest.raises(ValueError, match=r"report_state 10 is out of range 0\.\.9"):
        processor.report_error(10, "")


def test_tft_report_error_wants_a_string_code(monkeypatch):
    monkeypatch.setattr(processor_link, "_link", processor_link.ProcessorLink(0, 1))
    with pytest.raises(TypeError, match="error_code must be a string, got int"):
        tp.tft_report_error(2, 0x80E01801)


def test_exception_handler_passes_the_exception_fault_code():
    error = RuntimeError("UCE ERROR")
    assert fault_code_of(error) == ""
    error.fault_code = "80E01801"
    assert fault_code_of(error) == "80E01801"
    error.fault_code = 17
    assert fault_code_of(error) == ""
