"""The reference's controller-side module name, re-exporting mindio_adaptor.ttp.controller."""
from mindio_adaptor.ttp.controller import (tft_destroy_controller, tft_init_controller,  # noqa: F401
                                           tft_notify_controller_change_strategy, tft_notify_controller_dump,
                                           tft_notify_controller_on_global_rank, tft_notify_controller_prepare_action,
                                           tft_notify_controller_stop_train, tft_query_high_availability_switch,
                                           tft_register_mindx_callback, tft_start_controller)
