"""The reference's enumerations for the tft_* API; defined once in core (they cross the wire)."""
from mindio_adaptor.core.detection.enums import Action, OptimizerType, RepairType, ReportState

__all__ = ["Action", "OptimizerType", "RepairType", "ReportState"]
