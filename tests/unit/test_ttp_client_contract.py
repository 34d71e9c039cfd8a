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
    assert len(list(ReportState)) == 9  # the aliases add no members


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
