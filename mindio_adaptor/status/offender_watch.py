"""Repeat offenders, followed from the controller's own events (core/detection/offender_record keeps them).

What counts as an incident of a node, from the events:
- a decision's fault of kind node (the rank's process died, or hung) or memory (an uncorrectable memory
  error reported by the rank), charged to the rank's node (its failure domain);
- not the memory faults of a decision in which every rank of the job reported one: that is one check
  failing for the whole job (silent data corruption raises on every rank), which names no node;
- not communication faults: every peer of a broken link reports one;
- a rank's sub-health report (event sub_health), charged to its node: e.g. the holder whose copy of an
  optimizer shard was found corrupted;
- a rank found slow (event slow_rank, controller/slow_ranks.h), once each time it turns slow.

The controller's host polls the watch; a node that becomes a repeat offender is said once, with its
incidents. A rank's node is the failure domain it last reported; a rank the controller never learned one of
(it died before it reported to a controller that took over) is recorded as "rank R"."""
import logging
import re
import time
from typing import Callable, List, Tuple

from mindio_adaptor.core.detection.offender_record import Incident, OffenderRecord

logger = logging.getLogger(__name__)

DECISION_FAULTS = re.compile(r"faults ((?:\d+:\w+ ?)+)")
SUB_HEALTH = re.compile(r"^rank (\d+)(?: \(node .*\))?: (\S+)$")
SLOW_RANK = re.compile(r"^rank (\d+): ")
CHARGED_KINDS = ("node", "memory")


def charged_faults(kind: str, detail: str, world_size: int) -> List[Tuple[int, str]]:
    """(rank, what) for each incident one controller event names."""
    if kind == "sub_health":
        found = SUB_HEALTH.match(detail)
        return [(int(found[1]), f"sub-health {found[2]}")] if found else []
    if kind == "slow_rank":
        found = SLOW_RANK.match(detail)
        return [(int(found[1]), "slow rank")] if found else []
    if kind != "decision":
        return []
    listed = DECISION_FAULTS.search(detail)
    if not listed:
        return []
    faults = [(int(rank), fault) for rank, fault in (item.split(":") for item in listed[1].split())]
    job_wide = sum(1 for _, fault in faults if fault == "memory") >= max(world_size, 2)
    return [(rank, f"{fault} fault") for rank, fault in faults
            if fault in CHARGED_KINDS and not (fault == "memory" and job_wide)]


class OffenderWatch:
    def __init__(self, record: OffenderRecord, events: Callable[[], list], ranks: Callable[[], list],
                 say: Callable[[str], None] = logger.warning, clock: Callable[[], float] = time.time,
                 on_offender: Callable[[int], None] = lambda rank: None):
        """`on_offender(rank)`: a node became a repeat offender by an incident of `rank` (status/sub_health_
        responder acts on it by policy)."""
        self.record, self._events, self._ranks, self._say, self._clock = record, events, ranks, say, clock
        self._on_offender = on_offender
        self._seen = 0
        self._domains = {}  # rank -> the last failure domain it reported

    def say_remembered(self) -> None:
        """At the controller's start: the repeat offenders the record already holds."""
        for node, incidents in sorted(self.record.offenders(self._clock()).items()):
            self._say(f"remembered from earlier runs: {self.record.describe(node, incidents)}")

    def poll(self) -> None:
        ranks = self._ranks()
        self._domains.update({rank: r["domain"] for rank, r in enumerate(ranks) if r["domain"]})
        events = self._events()
        new, self._seen = events[self._seen:], len(events)
        for _, kind, detail in new:
            for rank, what in charged_faults(kind, detail, len(ranks)):
                node = self._domains.get(rank, f"rank {rank}")
                try:
                    offended = self.record.note(Incident(self._clock(), node, rank, what))
                except OSError as err:  # the job goes on; the incident is said, not kept
                    self._say(f"offender record {self.record.path} cannot be written ({err}): {what} of rank "
                              f"{rank} on node {node} is not remembered")
                    continue
                if offended:
                    self._say(self.record.describe(node, offended))
                    self._on_offender(rank)
