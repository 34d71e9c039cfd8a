"""The reference's enumerations, with its numeric values (they cross the wire and user code compares
them). The reference spells ReportState and RepairType members with a prefix (RS_RETRY, RT_SEND), the
way its clients write them; each prefixed name here is an alias of the same member (RepairType.RT_SEND is
RepairType.SEND), so both spellings work, by attribute and by name (ReportState["RS_RETRY"])."""
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
    # Ours: the rank's hardware is suspect (the error code says why), training goes on; not a fault.
    SUB_HEALTH = 9
    RS_NORMAL = 0
    RS_RETRY = 1
    RS_UCE = 2
    RS_UCE_CORRUPTED = 3
    RS_HCCL_FAILED = 4
    RS_INIT_FINISH = 5
    RS_PREREPAIR_FINISH = 6
    RS_STEP_FINISH = 7
    RS_UNKNOWN = 8
    RS_SUB_HEALTH = 9


class RepairType(IntEnum):
    SEND = 0
    UCE_HIGHLEVEL = 1
    UCE_LOWLEVEL = 2
    RECV_REPAIR = 3
    ROLLBACK = 4
    LOAD_CKPT = 5
    LOAD_REBUILD = 6
    RT_SEND = 0
    RT_UCE_HIGHLEVEL = 1
    RT_UCE_LOWLEVEL = 2
    RT_RECV_REPAIR = 3
    RT_ROLLBACK = 4
    RT_LOAD_CKPT = 5
    RT_LOAD_REBUILD = 6
