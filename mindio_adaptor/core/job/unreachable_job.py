"""A replacement process that can reach none of the job's stores, or none of its controllers, has nothing to
join: it says what it tried and exits JOB_UNREACHABLE (core/detection/exit_codes) before Megatron's start, rather than
dying of the first fact it cannot read (a JobStoreError, which exits 1 like any crash and which a launcher
answers by starting the same process again, with the same dead addresses, for as long as restarts last).

Checked once, where a replacement knows it is one: the fake backend's start (patches/process_replacement), a
warm spare's hand-out (patches/warm_spare). The stores are chosen as its first read of a fact would choose
them (core/job/paired_store.choose: before any registration, never a re-hosted slot's new store); a controller
answers when its port accepts a connection."""
from __future__ import annotations

import logging
import os
from typing import List, Mapping

from mindio_adaptor.core.detection.exit_codes import JOB_UNREACHABLE
from mindio_adaptor.core.job import paired_store
from mindio_adaptor.core.job.controller_address import ENV_CONTROLLER, controller_addresses

logger = logging.getLogger(__name__)


def problems(environ: Mapping[str, str] = os.environ, probe_s: float = paired_store.PROBE_S) -> List[str]:
    """What this process cannot reach of the job, in words; empty when a store and a controller answer."""
    found = []
    try:
        paired_store.choose(paired_store.store_addresses(environ), controller_addresses(environ), registered="",
                            probe_s=probe_s)
    except (paired_store.NoStoreAnswers, ValueError) as err:
        found.append(f"stores ({paired_store.ENV_STORES}={environ.get(paired_store.ENV_STORES, '')!r}, "
                     f"MASTER_PORT={environ.get('MASTER_PORT', '')!r}): {err}")
    controllers = controller_addresses(environ) or []
    if controllers and not any(paired_store.answers(address, probe_s) for address in controllers):
        found.append(f"controllers ({ENV_CONTROLLER}={environ.get(ENV_CONTROLLER, '')!r}): none accepted a "
                     f"connection within {probe_s:g} s")
    return found


def exit_if_unreachable(who: str, environ: Mapping[str, str] = os.environ) -> None:
    """SystemExit(JOB_UNREACHABLE) after one line naming what was tried, when `problems` finds any."""
    found = problems(environ)
    if not found:
        return
    logger.error("%s cannot reach the job: %s; exiting with code %d (JOB_UNREACHABLE: its launcher starts it "
                 "again only with changed addresses)", who, "; ".join(found), JOB_UNREACHABLE)
    raise SystemExit(JOB_UNREACHABLE)
