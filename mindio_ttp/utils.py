"""The reference's `mindio_ttp.utils`: the optimizer update's start and end times, recorded by the
client's optimizer wrapper, and whether a memory error at a given time can be repaired (the
reference's signature: times default to the recorded ones)."""
from mindio_adaptor.ttp.processor import (can_do_uce_repair_since_recorded as tft_can_do_uce_repair,  # noqa: F401
                                          tft_set_update_end_time, tft_set_update_start_time)
