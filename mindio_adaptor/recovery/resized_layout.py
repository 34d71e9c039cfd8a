"""The replica layout the controller plans with, after a resize (elastic training, docs/elastic.md).

The controller knows every process by the rank it registered under, its rank at the job's start, and
plans savers and repairs on rank lists in that numbering. A scale-in numbers the survivors densely
(core/layout/scale_in_plan), so while the job is scaled in this rank's Megatron ranks are not the controller's.
At a resize's REBUILD_GROUP the controller forgets the layout (csrc/controller/flows.h, relayouts): each
rank reports its layout at the new size, in the start's numbering, before it answers. Ranks the
controller names to this rank (a dump's savers) are taken the other way.
"""
import logging
from typing import List, Sequence

from mindio_adaptor.core.job import processor_link

logger = logging.getLogger(__name__)


def report(session) -> None:
    """This rank's replica layout at the current size, to the controller, in the start's numbering."""
    link = processor_link.current_or_none()
    if link is None or session.job.layout is None:
        return
    info = [dict(entry, rank_list=start_ranks(session, entry["rank_list"]))
            for entry in session.job.layout.to_reference()]
    link.report_layout(link.rank, info)
    logger.info("rank %d reported the replica layout at the current size: %s", link.rank,
                [(entry["rank_list"], entry["replica_cnt"]) for entry in info])


def start_ranks(session, ranks: Sequence[int]) -> List[int]:
    """The start's ranks of processes named by their current ranks."""
    plan = session.scale_in
    return [int(r) for r in ranks] if plan is None else [plan.survivors[r] for r in ranks]


def current_ranks(session, ranks: Sequence[int]) -> List[int]:
    """The current ranks of processes the controller names by their start's ranks."""
    plan = session.scale_in
    return [int(r) for r in ranks] if plan is None else [plan.new_rank(r) for r in ranks]
