"""The reference system's public API (`tft_*` names and enums) over the native controller and
processor. `mindio_ttp.framework_ttp` and `mindio_ttp.controller_ttp` re-export it."""
from mindio_adaptor.ttp.enums import Action, OptimizerType, RepairType, ReportState  # noqa: F401
