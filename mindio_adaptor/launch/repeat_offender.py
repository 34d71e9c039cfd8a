"""Whether this node may start, by the offender record (core/detection/offender_record) and --repeat-offenders: a
repeat offender is warned about and runs, or (refuse) the launcher exits before it meets the other nodes,
saying how to return the node to service."""
from __future__ import annotations

import os

from mindio_adaptor.core.detection.offender_record import OffenderRecord, OffenderSettingError
from mindio_adaptor.launch.config import LaunchConfig
from mindio_adaptor.launch.worker_env import failure_domain


def refused(config: LaunchConfig, log) -> bool:
    """True when this node must not start; says why (or warns) in the launcher's log."""
    try:
        record = OffenderRecord.from_env()
    except OffenderSettingError as err:
        log.info("error: %s", err)
        return True
    node = failure_domain(config, os.environ)
    incidents = record.offenders().get(node)
    if not incidents:
        return False
    said = record.describe(node, incidents)
    if config.repeat_offenders == "refuse":
        log.info("error: %s (record %s): this launcher refuses to start (--repeat-offenders refuse); return the "
                 "node to service with `mindio-adaptor offenders --forget %s`", said, record.path, node)
        return True
    log.info("warning: %s (record %s); it runs (--repeat-offenders warn)", said, record.path)
    return False
