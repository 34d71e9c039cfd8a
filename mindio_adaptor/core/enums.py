"""The reference's enumerations, with its numeric values (they cross the wire and user code compares
them)."""
from enum import IntEnum


class OptimizerType(IntEnum):
    ATTENTION = 0
    MOE = 1


class Action(IntEnum):
    RETRY = 0
    EXIT = 1


class ReportState(IntEnum):
    NORMAL = 0
    RETRY = 1
    UCE = 2
    UCE_CORRUPTED = 3
    HCCL_FAILED = 4
    INIT_FINISH = 5
    PREREPAIR_FINISH = 6
    STEP_FINISH = 7
    UNKNOWN = 8


class RepairType(IntEnum):
    SEND = 0
    UCE_HIGHLEVEL = 1
    UCE_LOWLEVEL = 2
    RECV_REPAIR = 3
    ROLLBACK = 4
    LOAD_CKPT = 5
    LOAD_REBUILD = 6
