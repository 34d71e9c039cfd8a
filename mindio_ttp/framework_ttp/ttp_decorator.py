"""The reference's processor-side module (`mindio_ttp.framework_ttp.ttp_decorator`), where its clients
import the tft_* calls and the helpers get_device and get/set_mindio_export_version; all of it is
mindio_adaptor.ttp. `mindio_ttp.framework_ttp` re-exports this module."""
from mindio_adaptor.ttp.controller import (tft_destroy_controller, tft_init_controller,  # noqa: F401
                                           tft_start_controller)
from mindio_adaptor.ttp.enums import Action, OptimizerType, RepairType, ReportState  # noqa: F401
from mindio_adaptor.ttp.exception_handler import tft_exception_handler, tft_register_exception_handler  # noqa: F401
from mindio_adaptor.ttp.processor import (get_device, get_mindio_export_version,  # noqa: F401
                                          set_mindio_export_version, tft_can_do_uce_repair, tft_destroy_processor,
                                          tft_end_updating_os, tft_get_reboot_type, tft_get_repair_step,
                                          tft_get_repair_type, tft_init_processor, tft_is_reboot_node, tft_pause_train,
                                          tft_register_clean_handler, tft_register_decrypt_handler,
                                          tft_register_exit_handler, tft_register_rebuild_group_handler,
                                          tft_register_rename_handler, tft_register_repair_handler,
                                          tft_register_rollback_handler, tft_register_save_ckpt_handler,
                                          tft_register_stop_handler, tft_register_stream_sync_handler,
                                          tft_register_zit_downgrade_rebuild_handler,
                                          tft_register_zit_upgrade_rebuild_handler,
                                          tft_register_zit_upgrade_repair_handler,
                                          tft_register_zit_upgrade_rollback_handler, tft_report_error,
                                          tft_report_load_ckpt_step, tft_report_saved_ckpt_step, tft_reset_limit_step,
                                          tft_set_dp_group_info, tft_set_optimizer_replica, tft_set_step_args,
                                          tft_start_copy_os, tft_start_processor, tft_start_updating_os,
                                          tft_wait_next_action)
