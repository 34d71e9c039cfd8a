"""A replaced node that hosts its controller and its workers' store again.

With controllers hosted by the launchers (`mindio-adaptor launch --controllers K`), node i < K holds slot i
of the lists every worker got (MINDIO_CONTROLLER_ADDR, MINDIO_STORE_ADDRS). When such a node is lost and
a new launcher takes its rank, it starts a backup controller and a workers' store on new ports. Its own
workers get the lists with the new slot; the survivors still hold the dead one, and with it the next loss
of the leading node would end the job (nothing left to take over). So:

- announce: a replacement process told by its launcher that its node re-hosts slot i
  (MINDIO_REHOSTED_SLOT=i) publishes the slot's new addresses in every store of the job that answers;
- adopt: every member, at the next rebuild of the communicators (every replacement has registered by
  then, so its announcement is there), takes the announced slots into its lists and its processor's, and
  copies the job's facts into the new store, which may have to serve the job when its controller leads;
  then marks the store adopted (REHOSTED_STORE_ADOPTED), which ends the announcing: the launcher gives
  MINDIO_REHOSTED_SLOT only to the processes it starts before that (launch/membership).

The leader never changes here: a slot is only re-hosted after its node was lost, so it was not leading.
"""
from __future__ import annotations

import logging
import os
from typing import List, MutableMapping, Optional, Sequence

from mindio_adaptor.core.job import job_store, processor_link
from mindio_adaptor.core.job.controller_address import ENV_CONTROLLER, controller_addresses
from mindio_adaptor.core.job.paired_store import (ENV_REHOSTED_SLOT, ENV_STORES, REHOSTED_STORE_ADOPTED, rehosted_slot,
                                                  store_addresses)

logger = logging.getLogger(__name__)


def _fact(slot: int) -> str:
    return f"control/slot/{slot}"


def announce(environ=os.environ) -> Optional[int]:
    """Publish this node's re-hosted slot (controller and store addresses); returns the slot, or None."""
    slot = rehosted_slot(environ)
    if slot is None:
        return None
    controllers, stores = controller_addresses(environ) or [], store_addresses(environ)
    if slot >= min(len(controllers), len(stores)):
        raise ValueError(f"{ENV_REHOSTED_SLOT}={slot}: the lists have {len(controllers)} controllers and "
                         f"{len(stores)} stores")
    job_store.publish(_fact(slot), {"controller": list(controllers[slot]), "store": list(stores[slot])})
    return slot


def adopt(facts: Sequence[str], environ: MutableMapping[str, str] = os.environ) -> List[int]:
    """Take every announced slot that differs from this process's lists: the lists in `environ`, the
    processor's, and `facts` copied into the slot's new store. Returns the slots taken."""
    controllers = controller_addresses(environ)
    if not controllers:
        return []
    stores = store_addresses(environ)
    taken = []
    for slot in range(min(len(controllers), len(stores))):
        announced = job_store.read_or(_fact(slot), None)
        if announced is None:
            continue
        controller, store = tuple(announced["controller"]), tuple(announced["store"])
        if (controllers[slot], stores[slot]) == (controller, store):
            continue
        copied = job_store.copy_into(store, facts)  # read where this process meets the job now
        job_store.write_into(store, REHOSTED_STORE_ADOPTED, slot)  # after the facts: they are there once it is
        controllers[slot], stores[slot] = controller, store
        link = processor_link.current_or_none()
        if link is not None:
            link.replace_controller(slot, *controller)
        taken.append(slot)
        logger.info("slot %d of the controllers moved to a replaced node: controller %s:%d, store %s:%d (facts "
                    "copied there: %s)", slot, *controller, *store, ", ".join(copied) or "none")
    if taken:
        environ[ENV_CONTROLLER] = ",".join(f"{h}:{p}" for h, p in controllers)
        environ[ENV_STORES] = ",".join(f"{h}:{p}" for h, p in stores)
    return taken
