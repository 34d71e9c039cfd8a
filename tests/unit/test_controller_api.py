"""The reference-compatible Python face: enums, handler registration checks, error classification,
environment validation, and the parts that are deliberately not implemented yet."""
import pytest

import mindio_ttp.controller_ttp as controller_ttp
import mindio_ttp.framework_ttp as framework_ttp
from mindio_adaptor import _native as nat
from mindio_adaptor.ttp import controller as ctl
from mindio_adaptor.ttp import processor as tp
from mindio_adaptor.ttp.enums import Action, OptimizerType, RepairType, ReportState
from mindio_adaptor.ttp.exception_handler import classify, tft_register_exception_handler, _user_patterns


def test_enum_values_are_the_reference_values():
    assert {e.name: e.value for e in OptimizerType} == {"ATTENTION": 0, "MOE": 1}
    assert {e.name: e.value for e in Action} == {"RETRY": 0, "EXIT": 1}
    # the reference's nine, then ours (SUB_HEALTH: a suspect rank, not a fault)
    assert [e.name for e in ReportState] == ["NORMAL", "RETRY", "UCE", "UCE_CORRUPTED", "HCCL_FAILED",
                                             "INIT_FINISH", "PREREPAIR_FINISH", "STEP_FINISH", "UNKNOWN",
                                             "SUB_HEALTH"]
    assert [e.value for e in ReportState] == list(range(10))
    assert [e.name for e in RepairType] == ["SEND", "UCE_HIGHLEVEL", "UCE_LOWLEVEL", "RECV_REPAIR", "ROLLBACK",
                                            "LOAD_CKPT", "LOAD_REBUILD"]
    assert [e.value for e in RepairType] == list(range(7))


def test_compatibility_modules_expose_the_reference_names():
    for name in ["tft_init_processor", "tft_start_processor", "tft_destroy_processor", "tft_set_optimizer_replica",
                 "tft_start_updating_os", "tft_end_updating_os", "tft_report_error", "tft_wait_next_action",
                 "tft_get_repair_step", "tft_get_repair_type", "tft_set_step_args", "tft_pause_train",
                 "tft_exception_handler", "tft_register_exception_handler", "Action", "RepairType", "ReportState",
                 "OptimizerType"] + [f"tft_register_{h}_handler" for h in
                                     ["save_ckpt", "rename", "exit", "stop", "clean", "repair", "rollback",
                                      "rebuild_group", "stream_sync"]]:
        assert callable(getattr(framework_ttp, name)), name
    for name in ["tft_init_controller", "tft_start_controller", "tft_destroy_controller",
                 "tft_register_mindx_callback", "tft_notify_controller_stop_train",
                 "tft_notify_controller_change_strategy", "tft_notify_controller_dump",
                 "tft_query_high_availability_switch"]:
        assert callable(getattr(controller_ttp, name)), name


def test_handler_registration_refuses_none_and_wrong_arity():
    with pytest.raises(ValueError, match="tft_register_stop_handler: func must not be None"):
        tp.tft_register_stop_handler(None)
    with pytest.raises(TypeError, match=r"tft_register_repair_handler: .* must accept 6 positional arguments "
                                        r"\(step, need_rebuild, error_ranks, repair_info, args, ctx\)"):
        tp.tft_register_repair_handler(lambda step, args: None)
    tp.tft_register_rollback_handler(lambda *a: None)  # variadic is fine
    tp.tft_register_clean_handler(lambda is_uce, args, ctx=None: 0)
    tp._handlers.clear()


def test_dispatch_calls_handlers_with_the_reference_arguments():
    seen = {}
    tp.tft_set_step_args("ARGS")
    tp.tft_register_save_ckpt_handler(lambda *a: seen.setdefault("save", a), ctx="C")
    tp.tft_register_repair_handler(lambda *a: seen.setdefault("repair", a))
    tp.tft_register_clean_handler(lambda *a: 2)
    base = {"step": 9, "is_uce": True, "need_rebuild": False, "error_ranks": [3], "repair": [], "save": []}
    assert tp._dispatch(dict(base, name="save_ckpt", save=[{"optimizer_type": 0, "ranks": [0, 1]}])) == (0, "")
    assert seen["save"] == (9, [{"type": 0, "ranks": [0, 1]}], "ARGS", "C")
    repair = {"optimizer_type": 1, "repair_type": 0, "src": [7], "dst": [3], "rank_list": [3, 7]}
    tp._rank = 7  # the sender: its own pairs, `type` parallel to them (test_ttp_client_contract has more)
    try:
        assert tp._dispatch(dict(base, name="repair", repair=[repair])) == (0, "")
    finally:
        tp._rank = None
    assert seen["repair"] == (9, False, [3], {"type": [1], "repair_type": 0, "src": [7], "dst": [3],
                                              "rank_list": [3, 7]}, "ARGS", None)
    assert tp._dispatch(dict(base, name="clean")) == (2, "")  # "memory error needs no rebuild"
    tp.tft_register_clean_handler(lambda *a: "weird")
    code, message = tp._dispatch(dict(base, name="clean"))
    assert code == 1 and "clean handler returned 'weird'" in message
    tp._handlers.clear()
    tp.tft_set_step_args(None)


@pytest.mark.parametrize("text,state", [
    ("UCE ERROR on device 3", ReportState.UCE), ("HBM MULTI BIT ECC", ReportState.UCE),
    ("FORCE STOP", ReportState.NORMAL), ("ARF FINISH", ReportState.PREREPAIR_FINISH),
    ("STEP FINISH", ReportState.STEP_FINISH), ("HCCL OP RETRY FAILED", ReportState.HCCL_FAILED),
    ("SUSPECT REMOTE ERROR", ReportState.HCCL_FAILED), ("UB LINK ERROR", ReportState.HCCL_FAILED),
    ("HCCS LINK ERROR", ReportState.HCCL_FAILED), ("CUDA out of memory", ReportState.UNKNOWN),
])
def test_runtime_errors_are_classified_by_first_matching_pattern(text, state):
    assert classify(RuntimeError(text))[0] == state


def test_non_runtime_errors_are_unknown_and_user_patterns_come_first():
    assert classify(ValueError("UCE ERROR"))[0] == ReportState.UNKNOWN
    tft_register_exception_handler("NCCL watchdog", "HCCL_FAILED")
    tft_register_exception_handler("UCE ERROR but fine", "NORMAL")
    try:
        assert classify(RuntimeError("NCCL watchdog timeout"))[0] == ReportState.HCCL_FAILED
        assert classify(RuntimeError("UCE ERROR but fine"))[0] == ReportState.NORMAL
        with pytest.raises(ValueError, match="unknown report state 'BROKEN'"):
            tft_register_exception_handler("x", "BROKEN")
    finally:
        _user_patterns.clear()


@pytest.mark.parametrize("value,message", [("5", r"TTP_NORMAL_ACTION_TIME_LIMIT=5 is out of range \[30, 1800\]"),
                                           ("1801", "out of range"), ("abc", "is not an integer")])
def test_action_time_limit_out_of_range_is_a_clear_error(monkeypatch, value, message):
    monkeypatch.setenv("TTP_NORMAL_ACTION_TIME_LIMIT", value)
    with pytest.raises(ValueError, match=message):
        ctl.tft_init_controller(-1, 4)
    with pytest.raises(ValueError, match=message):
        tp.tft_init_processor(0, 4)
    assert not ctl.tft_query_high_availability_switch()


def test_action_time_limit_default_and_test_override(monkeypatch):
    monkeypatch.delenv("TTP_NORMAL_ACTION_TIME_LIMIT", raising=False)
    monkeypatch.delenv("MINDIO_TEST_ACTION_TIME_LIMIT", raising=False)
    assert nat.action_time_limit_ms() == 180_000
    monkeypatch.setenv("TTP_NORMAL_ACTION_TIME_LIMIT", "30")
    assert nat.action_time_limit_ms() == 30_000
    monkeypatch.setenv("MINDIO_TEST_ACTION_TIME_LIMIT", "0.5")
    assert nat.action_time_limit_ms() == 500
    monkeypatch.setenv("MINDIO_HEARTBEAT_INTERVAL", "0")
    with pytest.raises(ValueError, match="MINDIO_HEARTBEAT_INTERVAL=0 is out of range"):
        nat.Processor(0, 1)


def test_unimplemented_parts_raise_not_implemented():
    with pytest.raises(NotImplementedError, match="ZIT"):
        ctl.tft_init_controller(-1, 4, enable_zit=True)
    with pytest.raises(NotImplementedError, match="ZIT"):
        tp.tft_init_processor(0, 4, enable_zit=True)
    with pytest.raises(ValueError, match="unknown action 'teleport'"):
        ctl.tft_notify_controller_prepare_action("teleport")
    with pytest.raises(ValueError, match="fault_ranks must map ranks to fault types 0..2"):
        ctl.tft_notify_controller_prepare_action("stop switch", {3: 7})
    with pytest.raises(NotImplementedError, match="STEP_FINISH and MIGRATION"):
        tp.tft_reset_limit_step()
    ctl.tft_init_controller(-1, 2)
    try:
        with pytest.raises(ValueError, match="hot switch refused: process replacement \\(ARF, --enable-worker-reboot\\) "
                                             "is off"):
            ctl.tft_notify_controller_prepare_action("hot switch", {1: 1})
        with pytest.raises(ValueError, match="stop switch refused: no hot switch is asked for"):
            ctl.tft_notify_controller_prepare_action("stop switch")
        with pytest.raises(NotImplementedError, match="'migration' is not implemented"):
            ctl.tft_notify_controller_change_strategy("migration")
        with pytest.raises(NotImplementedError, match="'upgrade' is not taken from the cluster manager: the "
                                                      "controller scales out by itself"):
            ctl.tft_notify_controller_change_strategy("upgrade")
        ctl.tft_notify_controller_change_strategy("downgrade")  # taken; used when a decision offered it
        with pytest.raises(ValueError, match="unknown strategy"):
            ctl.tft_notify_controller_change_strategy("teleport")
        with pytest.raises(ValueError, match="certificates come from MINDIO_TLS_CERT, MINDIO_TLS_KEY and MINDIO_TLS_CA"):
            ctl.tft_start_controller("127.0.0.1", 0, enable_tls=True, tls_info="/certs")
        with pytest.raises(ValueError, match="unknown cluster-manager action"):
            ctl.tft_register_mindx_callback("report_everything", print)
        with pytest.raises(ValueError, match="not 0 \\(memory\\), 1 \\(node\\) or 2"):
            ctl.tft_notify_controller_stop_train({1: 7})
    finally:
        ctl.tft_destroy_controller()


@pytest.mark.parametrize("name,value,message", [
    ("MINDIO_PRELOCK_TIMEOUT", "0.01", r"MINDIO_PRELOCK_TIMEOUT=0.01 is out of range \[0.05, 600\] seconds"),
    ("MINDIO_PRELOCK_TIMEOUT", "abc", "is not a number of seconds"),
    ("MINDIO_PRELOCK_TRIES", "0", r"MINDIO_PRELOCK_TRIES=0 is out of range \[1, 10\]"),
])
def test_prelock_timer_out_of_range_is_a_clear_error(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        ctl.tft_init_controller(-1, 4)
    with pytest.raises(ValueError, match=message):
        tp.tft_init_processor(0, 4)
    assert not ctl.tft_query_high_availability_switch()


def test_a_hot_switch_is_refused_with_the_reason_and_changes_nothing():
    ctl.tft_init_controller(-1, 4, enable_arf=True)
    try:
        with pytest.raises(ValueError, match="names no rank"):
            ctl.tft_notify_controller_prepare_action("hot switch", {})
        with pytest.raises(ValueError, match="non-empty list of ints"):
            ctl.hot_switch([True])
        # No rank registered: the controller is not training normally yet.
        with pytest.raises(ValueError, match="hot switch refused: the job is in state INIT"):
            ctl.tft_notify_controller_prepare_action("hot switch", {1: 0})
        with pytest.raises(ValueError, match="stop switch refused: no hot switch is asked for"):
            ctl.tft_notify_controller_prepare_action("stop switch", {1: 0})
        assert ctl.controller_state() == "INIT"
    finally:
        ctl.tft_destroy_controller()


def test_the_reboot_type_comes_from_the_launcher(monkeypatch):
    monkeypatch.setenv("MINDIO_RESTARTED", "1")
    monkeypatch.setenv("MINDIO_REBOOT_TYPE", "hot switch")
    tp.tft_init_processor(0, 4, enable_arf=True)
    try:
        assert tp.tft_is_reboot_node() and tp.tft_get_reboot_type() == "hot switch"
        monkeypatch.setenv("MINDIO_REBOOT_TYPE", "warm boot")
        with pytest.raises(ValueError, match="MINDIO_REBOOT_TYPE='warm boot': expected one of 'arf', 'hot switch'"):
            tp.tft_get_reboot_type()
    finally:
        tp.tft_destroy_processor()


def test_arf_switches_and_the_restarted_marker(monkeypatch):
    ctl.tft_init_controller(-1, 4, enable_arf=True)
    ctl.tft_destroy_controller()
    monkeypatch.setenv("MINDIO_RESTARTED", "1")
    with pytest.raises(ValueError, match="MINDIO_RESTARTED=1 marks a restarted process.*enable_arf=True"):
        tp.tft_init_processor(0, 4)
    tp.tft_init_processor(0, 4, enable_arf=True)
    try:
        assert tp.tft_is_reboot_node() and tp.tft_get_reboot_type() == "arf"
    finally:
        tp.tft_destroy_processor()
    monkeypatch.setenv("MINDIO_RESTARTED", "0")
    tp.tft_init_processor(0, 4, enable_arf=True)
    try:
        assert not tp.tft_is_reboot_node()
    finally:
        tp.tft_destroy_processor()
    monkeypatch.setenv("MINDIO_RESTARTED", "yes")
    with pytest.raises(ValueError, match="MINDIO_RESTARTED='yes' is not an integer"):
        tp.tft_init_processor(0, 4, enable_arf=True)


@pytest.mark.parametrize("value,message", [("0.01", r"MINDIO_ARF_WAIT_S=0.01 is out of range \[0.1, 3600\] seconds"),
                                           ("3601", "out of range"), ("soon", "is not a number of seconds")])
def test_arf_wait_out_of_range_is_a_clear_error(monkeypatch, value, message):
    monkeypatch.setenv("MINDIO_ARF_WAIT_S", value)
    with pytest.raises(ValueError, match=message):
        ctl.tft_init_controller(-1, 4, enable_arf=True)
    assert not ctl.tft_query_high_availability_switch()


@pytest.mark.parametrize("value,message", [("0", r"MINDIO_TAKEOVER_WAIT_S=0 is out of range \[0.1, 3600\] seconds"),
                                           ("7200", "out of range"), ("later", "is not a number of seconds")])
def test_takeover_wait_out_of_range_is_a_clear_error(monkeypatch, value, message):
    monkeypatch.setenv("MINDIO_TAKEOVER_WAIT_S", value)
    with pytest.raises(ValueError, match=message):
        ctl.tft_init_controller(-1, 4, backup=True)
    assert not ctl.tft_query_high_availability_switch()


def test_calls_that_need_a_processor_or_controller_say_so():
    for call in [tp.tft_start_copy_os, lambda: tp.tft_report_load_ckpt_step(3),
                 lambda: tp.tft_set_dp_group_info(0, [0, 1])]:
        with pytest.raises(RuntimeError, match="call tft_init_processor"):
            call()
    with pytest.raises(RuntimeError, match="call tft_init_controller"):
        ctl.tft_notify_controller_on_global_rank({1: 1})


def test_dp_group_info_is_checked_and_kept():
    tp.tft_init_processor(1, 4)
    try:
        assert tp.tft_get_dp_group_info() is None
        tp.tft_set_dp_group_info(1, [1, 3])
        assert tp.tft_get_dp_group_info() == [1, 3]
        with pytest.raises(ValueError, match="rank 0 is not this processor's rank 1"):
            tp.tft_set_dp_group_info(0, [0, 2])
        with pytest.raises(ValueError, match=r"rank 1 is not in its DP group \[0, 2\]"):
            tp.tft_set_dp_group_info(1, [0, 2])
        with pytest.raises(ValueError, match=r"ranks \[4\] are not ints in 0..3"):
            tp.tft_set_dp_group_info(1, [1, 4])
        with pytest.raises(ValueError, match="ranks repeat"):
            tp.tft_set_dp_group_info(1, [1, 1])
        with pytest.raises(ValueError, match="non-empty list"):
            tp.tft_set_dp_group_info(1, [])
        with pytest.raises(ValueError, match="step must be an int >= 0"):
            tp.tft_report_load_ckpt_step(-2)
    finally:
        tp.tft_destroy_processor()
    assert tp.tft_get_dp_group_info() is None


@pytest.mark.parametrize("err,start,end,ok", [
    (10.0, 5.0, 8.0, True),    # after the update: its result is sound
    (6.0, 5.0, 8.0, True),     # during the update: the step is recomputed
    (6.0, 5.0, None, True),    # the update still runs
    (4.0, 5.0, 8.0, False),    # before the update started: the update may have read bad memory
])
def test_can_do_uce_repair_by_when_the_error_happened(err, start, end, ok):
    assert tp.tft_can_do_uce_repair(err, start, end) is ok


def test_can_do_uce_repair_refuses_non_times():
    with pytest.raises(ValueError, match="err_time must be a time in seconds"):
        tp.tft_can_do_uce_repair("now", 1.0, 2.0)
    with pytest.raises(ValueError, match="update_end must be a time in seconds or None"):
        tp.tft_can_do_uce_repair(1.0, 1.0, float("nan"))


def test_on_global_rank_checks_its_arguments():
    ctl.tft_init_controller(-1, 4)
    try:
        with pytest.raises(ValueError, match="time must be a positive int"):
            ctl.tft_notify_controller_on_global_rank([1], time=0)
        with pytest.raises(ValueError, match="fault_ranks is empty"):
            ctl.tft_notify_controller_on_global_rank([])
        with pytest.raises(ValueError, match="dict rank -> fault type or a list"):
            ctl.tft_notify_controller_on_global_rank("1")
        with pytest.raises(ValueError, match="fault rank 9 is out of range"):
            ctl.tft_notify_controller_on_global_rank({9: 1})
        with pytest.raises(ValueError, match="not 0 \\(memory\\), 1 \\(node\\) or 2"):
            ctl.tft_notify_controller_on_global_rank({1: 5})
    finally:
        ctl.tft_destroy_controller()
