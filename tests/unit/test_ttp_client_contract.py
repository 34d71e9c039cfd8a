"""What the reference's real clients import and call, as they call it (MindSpeed-LLM's
core/high_availability and training, MindCluster's TaskD controller side), on our face."""
import importlib

import pytest

from mindio_adaptor.ttp import controller as ctl
from mindio_adaptor.ttp import processor as tp
from mindio_adaptor.ttp.exception_handler import _user_patterns, classify

# module -> names, as the clients' import lines name them
CLIENT_IMPORTS = {
    "mindio_ttp.framework_ttp": [
        "tft_exception_handler", "tft_init_controller", "tft_start_controller", "tft_init_processor",
        "tft_start_processor", "tft_register_rename_handler", "set_mindio_export_version",
        "tft_register_save_ckpt_handler", "tft_set_optimizer_replica", "tft_set_dp_group_info",
        "tft_register_stop_handler", "tft_register_clean_handler", "tft_register_repair_handler",
        "tft_register_rollback_handler", "tft_register_rebuild_group_handler", "tft_is_reboot_node",
        "tft_register_stream_sync_handler", "tft_register_exception_handler", "OptimizerType", "RepairType",
        "tft_start_updating_os", "tft_end_updating_os", "tft_pause_train",
        "tft_register_zit_upgrade_rebuild_handler", "tft_register_zit_upgrade_repair_handler",
        "tft_register_zit_upgrade_rollback_handler", "tft_register_zit_downgrade_rebuild_handler"],
    "mindio_ttp.framework_ttp.ttp_decorator": [
        "get_device", "get_mindio_export_version", "tft_report_load_ckpt_step", "tft_get_repair_type"],
    "mindio_ttp.utils": ["tft_set_update_start_time", "tft_set_update_end_time", "tft_can_do_uce_repair"],
    "mindio_ttp.controller_ttp": [
        "tft_init_controller", "tft_start_controller", "tft_notify_controller_dump",
        "tft_notify_controller_stop_train", "tft_register_mindx_callback", "tft_notify_controller_on_global_rank",
        "tft_notify_controller_change_strategy", "tft_destroy_controller", "tft_query_high_availability_switch",
        "tft_notify_controller_prepare_action"],
}


@pytest.mark.parametrize("module", sorted(CLIENT_IMPORTS))
def test_every_name_the_clients_import_is_there(module):
    imported = importlib.import_module(module)
    missing = [name for name in CLIENT_IMPORTS[module] if not hasattr(imported, name)]
    assert not missing, f"{module} lacks {missing}"


def test_prefixed_enum_names_are_the_same_members():
    from mindio_ttp.framework_ttp import OptimizerType, RepairType, ReportState

    assert [RepairType.RT_SEND.value, RepairType.RT_UCE_HIGHLEVEL.value, RepairType.RT_UCE_LOWLEVEL.value,
            RepairType.RT_RECV_REPAIR.value, RepairType.RT_ROLLBACK.value, RepairType.RT_LOAD_CKPT.value,
            RepairType.RT_LOAD_REBUILD.value] == list(range(7))
    assert RepairType.RT_SEND is RepairType.SEND and ReportState["RS_RETRY"] is ReportState.RETRY
    assert ReportState.RS_INIT_FINISH.value == 5 and OptimizerType.ATTENTION.value == 0
    assert len(list(ReportState)) == 10  # the aliases add no members


def test_a_precision_error_handler_registered_as_rs_retry_classifies_its_pattern():
    from mindio_ttp.framework_ttp import ReportState, tft_register_exception_handler

    tft_register_exception_handler("PRECISION ERROR", "RS_RETRY", lambda err: "PRECISION ERROR")
    try:
        state, _ = classify(RuntimeError("PRECISION ERROR: loss is nan, load ckpt step=3"))
        assert state is ReportState.RS_RETRY
    finally:
        _user_patterns.clear()


def test_export_version_round_trip():
    from mindio_ttp.framework_ttp import set_mindio_export_version
    from mindio_ttp.framework_ttp.ttp_decorator import get_mindio_export_version

    set_mindio_export_version("MindSpeed-LLM")
    try:
        assert get_mindio_export_version() in ["MindSpeed", "MindSpeed-LLM"]
    finally:
        tp._export_version = None
    with pytest.raises(TypeError, match="version must be a string"):
        set_mindio_export_version(3)


def test_get_device_is_the_local_rank_on_a_host_without_an_accelerator(monkeypatch):
    from mindio_ttp.framework_ttp.ttp_decorator import get_device

    monkeypatch.setenv("LOCAL_RANK", "3")
    assert get_device() == 3


def test_elastic_handlers_register_with_the_references_arguments():
    from mindio_ttp import framework_ttp as ft

    ft.tft_register_zit_upgrade_repair_handler(lambda step, need_rebuild, error_ranks, repair_info, args, params: 0)
    ft.tft_register_zit_upgrade_rollback_handler(lambda step, args, params: 0)
    ft.tft_register_zit_upgrade_rebuild_handler(lambda fault_ranks, args, params: 0)
    ft.tft_register_zit_downgrade_rebuild_handler(lambda *args, **kwargs: 0)  # MindSpeed-LLM's style
    try:
        assert {"zit_upgrade_repair", "zit_upgrade_rollback", "zit_upgrade_rebuild",
                "zit_downgrade_rebuild"} <= set(tp._handlers)
        with pytest.raises(TypeError, match=r"must accept 4 positional arguments \(new_dp_ranks, new_world_ranks, "
                                            r"args, params\)"):
            ft.tft_register_zit_downgrade_rebuild_handler(lambda args, params: 0)
    finally:
        tp._handlers.clear()


def test_decrypt_handler_none_clears_it_and_a_non_callable_is_refused():
    from mindio_ttp.framework_ttp import ttp_decorator as td

    td.tft_register_decrypt_handler(lambda cipher: cipher)
    assert tp._decrypt_handler is not None
    td.tft_register_decrypt_handler(None)
    assert tp._decrypt_handler is None
    with pytest.raises(TypeError, match="fn must be callable or None"):
        td.tft_register_decrypt_handler("key")


def test_uce_repair_check_uses_the_recorded_update_times():
    from mindio_ttp import utils

    tp._update_times.clear()
    assert utils.tft_can_do_uce_repair(1_000) is False  # before the first update: nothing to repair from
    utils.tft_set_update_start_time(100)
    utils.tft_set_update_end_time(200)
    assert utils.tft_can_do_uce_repair(300) is True    # after the update ended
    assert utils.tft_can_do_uce_repair(150) is True    # during it: the step is recomputed
    assert utils.tft_can_do_uce_repair(50) is False    # before it: the update may have read bad memory
    assert utils.tft_can_do_uce_repair(None) is False  # no error time known
    assert utils.tft_can_do_uce_repair(50, 10, 20) is True  # explicit times win over the recorded ones
    utils.tft_set_update_start_time()  # no time given: now, on this process's clock
    assert tp._update_times["start"] > 200
    tp._update_times.clear()


def test_cluster_callbacks_come_before_the_controller_and_outlive_it():
    from mindio_ttp import controller_ttp as ct

    assert ct.tft_register_mindx_callback("report_fault_ranks", print) == 0  # no controller yet
    ct.tft_init_controller(-1, 2, False, False, False)
    try:
        assert ctl._cluster_callbacks == {"report_fault_ranks": print}
    finally:
        ct.tft_destroy_controller()
    assert ctl._cluster_callbacks == {"report_fault_ranks": print}


def test_handlers_get_the_decorated_calls_arguments_and_the_retry_sees_their_assignments(monkeypatch):
    # As MindSpeed-LLM's tft_train(train_args, test_data_iterator_list): a rebuild handler assigns a new
    # model into the list; the retried call is made from that list.
    from mindio_ttp.framework_ttp import tft_exception_handler

    tp.tft_register_rebuild_group_handler(lambda fault_ranks, args, ctx: args[0].__setitem__(1, "rebuilt model"))
    decisions = iter([0])  # RETRY once
    monkeypatch.setattr(tp, "tft_report_error", lambda state, code="": None)
    monkeypatch.setattr(tp, "tft_wait_next_action", lambda: next(decisions))
    seen = []

    @tft_exception_handler
    def train(train_args, test_iterators):
        seen.append(list(train_args))
        if len(seen) == 1:
            assert tp._dispatch({"name": "rebuild_group", "step": 3, "error_ranks": [1]}) == (0, "")
            raise RuntimeError("UCE ERROR")
        return "done"

    try:
        assert train(["forward", "model", "optimizer"], [None]) == "done"
        assert seen == [["forward", "model", "optimizer"], ["forward", "rebuilt model", "optimizer"]]
        assert tp.handler_args() == [["forward", "rebuilt model", "optimizer"], [None]]
        tp.tft_set_step_args("MINE")  # tft_set_step_args wins over the decorated call's arguments
        assert tp.handler_args() == "MINE"
    finally:
        tp._handlers.clear()
        tp.tft_set_step_args(None)
        tp.set_decorated_args(None)


def test_a_handler_assigning_a_whole_argument_changes_the_retried_call(monkeypatch):
    from mindio_ttp.framework_ttp import tft_exception_handler

    tp.tft_register_repair_handler(lambda step, rebuild, errs, info, args, ctx: args.__setitem__(1, "new optimizer"))
    monkeypatch.setattr(tp, "tft_report_error", lambda state, code="": None)
    monkeypatch.setattr(tp, "tft_wait_next_action", lambda: 0)
    calls = []

    @tft_exception_handler
    def train(model, optimizer):
        calls.append(optimizer)
        if len(calls) == 1:
            tp._dispatch({"name": "repair", "step": 1, "repair": [
                {"optimizer_type": 0, "repair_type": 1, "src": [1], "dst": [0], "rank_list": [0, 1]}]})
            raise RuntimeError("UCE ERROR")
        return optimizer

    try:
        assert train("model", "optimizer") == "new optimizer" and calls == ["optimizer", "new optimizer"]
    finally:
        tp._handlers.clear()
        tp.set_decorated_args(None)


def test_repair_info_holds_only_this_ranks_pairs_with_a_type_per_pair():
    plan = [{"optimizer_type": 0, "repair_type": 0, "src": [4, 5], "dst": [0, 1], "rank_list": [0, 1, 4, 5]},
            {"optimizer_type": 1, "repair_type": 0, "src": [4], "dst": [0], "rank_list": [0, 4]}]
    (sender,) = tp.own_repair_infos(plan, 4)
    assert sender == {"type": [0, 1], "repair_type": 0, "src": [4, 4], "dst": [0, 0], "rank_list": [0, 1, 4, 5]}
    receiver_plan = [dict(e, repair_type=1) for e in plan]
    (receiver,) = tp.own_repair_infos(receiver_plan, 1)
    assert receiver["src"] == [5] and receiver["dst"] == [1] and receiver["type"] == [0]
    # a handler written for the int-typed repair_info still reads one type as an int
    assert receiver["type"] == 0 and int(receiver["type"]) == 0 and ["ATTENTION", "MOE"][receiver["type"]]
    with pytest.raises(TypeError, match=r"is \[0, 1\], the optimizer type of each"):
        int(sender["type"])
    assert sender["type"] != 0


def test_the_repair_handler_is_called_per_rank_with_the_references_arguments():
    calls = []
    tp.tft_register_repair_handler(lambda *a: calls.append(a))
    plan = [{"optimizer_type": 0, "repair_type": 1, "src": [4, 5], "dst": [0, 1], "rank_list": [0, 1, 4, 5]}]
    tp._rank = 1
    try:
        assert tp._dispatch({"name": "repair", "step": 7, "repair": plan}) == (0, "")
    finally:
        tp._rank = None
        tp._handlers.clear()
    # UCE_HIGHLEVEL: need_rebuild; error_ranks are the call's dst; args None (no decorated call, no step args)
    assert calls == [(7, True, [1], {"type": [0], "repair_type": 1, "src": [5], "dst": [1], "rank_list": [0, 1, 4, 5]},
                      None, None)]


@pytest.mark.parametrize("answer,state", [
    ("PRECISION ERROR", "RS_RETRY"),   # the handle names its own pattern
    ("UCE ERROR", "RS_UCE"),           # or any pattern of the table, built-in ones too
    ("OTHER", "RS_UNKNOWN"),           # the reference's "nothing known"
    ("HBM MULTI BIT ECC can't repair", "RS_UCE_CORRUPTED"),
    (None, "RS_RETRY"),                # ours: a handle that only observes keeps the pattern's state
    ("no such key", "RS_UNKNOWN"),     # a mistake in the handle: logged, reported as UNKNOWN
])
def test_a_pattern_handle_gets_the_text_and_its_answer_selects_the_state(answer, state):
    from mindio_ttp.framework_ttp import ReportState, tft_register_exception_handler
    from mindio_adaptor.ttp.exception_handler import report_state_of

    texts = []
    tft_register_exception_handler("PRECISION ERROR", "RS_RETRY", lambda text: texts.append(text) or answer)
    try:
        error = RuntimeError("PRECISION ERROR: loss is nan")
        assert report_state_of(error) is ReportState[state]
        assert texts == ["PRECISION ERROR: loss is nan"]
    finally:
        _user_patterns.clear()


def test_the_last_registration_of_a_pattern_names_its_state():
    from mindio_adaptor.core.detection import faults
    from mindio_ttp.framework_ttp import ReportState, tft_register_exception_handler

    tft_register_exception_handler("MY ERROR", "RS_UCE")
    tft_register_exception_handler("MY ERROR", "RS_HCCL_FAILED")
    try:
        assert faults.DEFAULT.state_of_key("MY ERROR") is ReportState.HCCL_FAILED
        assert faults.DEFAULT.state_of_key(3) is None
    finally:
        _user_patterns.clear()


def test_a_normal_end_destroys_the_processor_and_an_own_controller(monkeypatch):
    from mindio_ttp.framework_ttp import tft_exception_handler

    destroyed = []
    monkeypatch.setattr(tp, "tft_destroy_processor", lambda: destroyed.append("processor"))
    monkeypatch.setattr(ctl, "tft_query_high_availability_switch", lambda: True)
    monkeypatch.setattr(ctl, "tft_destroy_controller", lambda: destroyed.append("controller"))
    monkeypatch.delenv("MINDX_TASK_ID", raising=False)
    assert tft_exception_handler(lambda: 5)() == 5
    assert destroyed == ["processor", "controller"]
    monkeypatch.setenv("MINDX_TASK_ID", "job-1")  # MindX owns the controller: it stays
    destroyed.clear()
    tft_exception_handler(lambda: 5)()
    assert destroyed == ["processor"]
    tp.set_decorated_args(None)


ADAPTOR_NAMES = ["tft_init_controller_processor", "tft_register_processor", "tft_train", "tft_set_losses_reduced",
                 "tft_is_arf_reboot_node", "ttp_initialize_replica_dp_group", "ttp_get_replica_dp_num",
                 "ttp_get_dp_cp_replica_group", "ttp_get_dp_cp_replica_group_gloo", "ttp_get_dp_ep_replica_group",
                 "ttp_get_dp_ep_replica_group_gloo", "TTPReplicaOptimizer", "TTPFP16ReplicaOptimizer"]


def test_the_older_adaptor_names_exist_and_need_the_patched_job():
    from mindio_ttp import adaptor
    from mindio_ttp.adaptor.utils import CONFIG_INDEX, MODEL_INDEX, OPTIM_INDEX, SCHEDULER_INDEX, TRAIN_PARAM

    assert (TRAIN_PARAM, MODEL_INDEX, OPTIM_INDEX, SCHEDULER_INDEX, CONFIG_INDEX) == (0, 1, 2, 3, -1)
    assert all(callable(getattr(adaptor, name)) for name in ADAPTOR_NAMES)
    with pytest.raises(adaptor.AdaptorNotReady, match=r"call mindio_adaptor.patch_all\(\)"):
        adaptor.tft_init_controller_processor(enable_tls=False, tls_option_top_path="")
    with pytest.raises(NotImplementedError, match="replica groups is done by mindio_adaptor's Megatron patches"):
        adaptor.ttp_initialize_replica_dp_group(1, 1, 1, 1, 4)


def test_the_older_adaptor_trains_through_megatrons_patched_train(monkeypatch):
    import sys
    import types

    from mindio_adaptor.core.job import processor_link
    from mindio_adaptor.patches import exception_loop, registry
    from mindio_ttp import adaptor

    monkeypatch.setattr(registry, "_active", True)
    monkeypatch.setattr(exception_loop, "ha_enabled", lambda: True)
    training = types.ModuleType("megatron.training.training")
    training.train = lambda *args: (len(args), 0.0)
    package = types.ModuleType("megatron.training")
    package.training = training
    monkeypatch.setitem(sys.modules, "megatron.training", package)
    monkeypatch.setitem(sys.modules, "megatron.training.training", training)
    assert adaptor.tft_train(["forward", "model", "optimizer"], ["test"]) == (3, 0.0)
    with pytest.raises(adaptor.AdaptorNotReady, match=r"no \['stop', 'clean'"):
        adaptor.tft_register_processor(print, print, "encoder_or_decoder")
    link = types.SimpleNamespace(answers=("stop", "clean", "rebuild_group", "repair", "rollback", "save_ckpt"))
    monkeypatch.setattr(processor_link, "_link", link)  # what recovery/flows.answer_actions says it answers
    adaptor.tft_register_processor(print, len, "encoder_or_decoder")
    assert adaptor.tft_providers() == {"dataset": print, "model": len, "model_type": "encoder_or_decoder"}
