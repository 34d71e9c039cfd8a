"""Silent data corruption: the R holders of an optimizer shard must hold the same bytes after every
update, so every --sdc-check-interval steps, and at every step whose periodic checkpoint is saved (a
checkpoint then only ever holds checked state), each rank fingerprints its shard (core/layout/shard_fingerprint)
and the job compares the holders' fingerprints (core/layout/holder_vote).

A disagreement is raised on every rank as a memory fault (SDC_ERROR): a corrupted value reaches every
rank's gradients within a step, so no rank's state is trusted, and the controller reloads the last
checkpoint online and the job recomputes from there (the controller's ordinary decision when no live
peer can repair a shard). Without a checkpoint to reload, or without online repair, the job ends with
nothing saved. When the recomputation passes the disputed step, core/layout/holder_vote's rule names the corrupted
copies: each of their holders logs its host as suspect and reports sub-health (SDC_CODE) to the controller,
which flags the rank. A disagreement again at the same step after recomputing cannot be settled: it is
raised as an unrecoverable error."""
import hashlib
import logging
import socket
import time
from typing import Dict, List, Tuple

import torch
import torch.distributed as dist

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.job import processor_link
from mindio_adaptor.core.layout.holder_vote import Disagreement, compare_holders, judge_copies
from mindio_adaptor.core.layout.replica_layout import ATTENTION, MOE
from mindio_adaptor.core.layout.shard_fingerprint import fingerprints, grouped_fingerprints
from mindio_adaptor.recovery.session import SESSION

logger = logging.getLogger(__name__)

SDC_ERROR = "SDC ERROR"  # core/detection/faults: a memory fault of the rank that raises it
SDC_CODE = "MINDIO-SDC"  # the sub-health a corrupted copy's holder reports (the controller flags it)
OPTIMIZER_NAMES = {ATTENTION: "optimizer", MOE: "expert optimizer"}
DIGEST_BYTES = 16

# Disputed step -> each disputed shard's optimizer type, disagreement, and its holders' disputed tensors
# (by position in the shard, in the holders' order). Every rank keeps them, across the online reload.
_disputes: Dict[int, List[Tuple[int, Disagreement, list]]] = {}


class SilentCorruption(RuntimeError):
    """The holders of some optimizer shard hold different bytes."""


class UnsettledCorruption(RuntimeError):
    """The holders disagree again after recomputing the disputed step: no copy can be trusted."""


def check_is_due(step: int, margs) -> bool:
    if SESSION.job.layout is None or margs.num_distributed_optimizer_instances < 2:
        return False
    interval = 1 if SESSION.config.verify_optimizer_replicas else SESSION.config.sdc_check_interval
    saved = margs.save and margs.save_interval and step % margs.save_interval == 0
    return bool((interval and step % interval == 0) or saved)


def check_holders(step: int, say_agreement: bool = False) -> None:
    """A collective of the whole job: every rank calls it after the same step."""
    started = time.monotonic()
    shards = megatron_job.shard_tensors_by_optimizer(SESSION.job.optimizer)
    # whether the holders agree, from the shard's words in a few groups; which tensors differ only when they do not
    digests = _gathered_digests({kind: _digest(grouped_fingerprints(tensors)) for kind, tensors in shards.items()},
                                _device_of(shards))
    disputed = [(kind, holders) for kind, holders in SESSION.job.layout.shard_holders()
                if len({digests[h].get(kind) for h in holders}) > 1]
    if not disputed:
        _settle(step, shards)
        if say_agreement and dist.get_rank() == 0:
            logger.info("step %d: every optimizer shard identical on its %d holders (%d tensors checked on "
                        "rank 0 in %.1f ms)", step, SESSION.job.layout.sets[0].replica_cnt,
                        sum(map(len, shards.values())), 1000 * (time.monotonic() - started))
        return
    mine = {kind: tuple(fingerprints(tensors)) for kind, tensors in shards.items()}
    me = dist.get_rank()
    prints = megatron_job.gather_objects({kind: mine[kind] for kind, holders in disputed if me in holders})
    found = [(kind, compare_holders(step, holders, [prints[h][kind] for h in holders]))
             for kind, holders in disputed]
    described = "; ".join(_describe(kind, dispute) for kind, dispute in found)
    if step in _disputes:
        raise UnsettledCorruption(f"optimizer shard copies still differ after recomputing step {step}: "
                                  f"{described}")
    values = megatron_job.gather_objects({kind: {i: shards[kind][i].detach().cpu() for i in dispute.tensors}
                                          for kind, dispute in found if me in dispute.holders})
    _disputes[step] = [(kind, dispute, [values[h][kind] for h in dispute.holders]) for kind, dispute in found]
    if me == min(dispute.holders[0] for _, dispute in found):
        logger.error("silent data corruption found after step %d: %s", step, described)
    raise SilentCorruption(f"{SDC_ERROR}: the holders of {len(found)} optimizer shard(s) disagree after step "
                           f"{step}; no rank's state is trusted until it is recomputed from a checkpoint")


def _digest(prints) -> bytes:
    return hashlib.blake2b(repr(prints).encode(), digest_size=DIGEST_BYTES).digest()


def _gathered_digests(mine: Dict[int, bytes], device) -> List[Dict[int, bytes]]:
    """Every rank's digest per optimizer type, in rank order, by one all_gather of a few bytes (a gather of
    objects pickles them and takes two collectives: 5-6 ms of the tiny job's 8 ms check, measured)."""
    kinds = sorted(OPTIMIZER_NAMES)
    table = torch.zeros(len(kinds), 1 + DIGEST_BYTES, dtype=torch.uint8, device=device)
    for row, kind in enumerate(kinds):
        if kind in mine:
            table[row, 0] = 1
            table[row, 1:] = torch.frombuffer(bytearray(mine[kind]), dtype=torch.uint8)
    everyone = [torch.empty_like(table) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, table)
    return [{kind: bytes(rows[row, 1:].tolist()) for row, kind in enumerate(kinds) if rows[row, 0]}
            for rows in (t.cpu() for t in everyone)]


def _device_of(shards: dict):
    """Where the shards live (the all_gather's tensors must be there for NCCL and HCCL)."""
    return next((t.device for tensors in shards.values() for t in tensors), torch.device("cpu"))


def _describe(kind: int, dispute: Disagreement) -> str:
    said = (f"the {OPTIMIZER_NAMES[kind]} shard of ranks {list(dispute.holders)}: {len(dispute.tensors)} of "
            f"{len(dispute.prints[0])} tensors differ (positions {list(dispute.tensors[:8])}"
            f"{'...' if len(dispute.tensors) > 8 else ''})")
    if dispute.majority:
        said += f", ranks {list(dispute.majority)} agree"
    return said


def _settle(step: int, shards: dict) -> None:
    """The holders agree at a step they disputed before recomputing it: judge the copies they held then
    (core/layout/holder_vote). Each corrupted holder names itself and its host; the first good one says the rest."""
    me = dist.get_rank()
    for kind, dispute, earlier in _disputes.pop(step, ()):
        if me not in dispute.holders:
            continue
        recomputed = {i: shards[kind][i].detach().cpu() for i in dispute.tensors}
        corrupted, rule = judge_copies(dispute, tuple(fingerprints(shards[kind])), earlier, recomputed)
        name = OPTIMIZER_NAMES[kind]
        if me in corrupted:
            logger.error("silent data corruption after step %d: this rank's copy of its %s shard was the "
                         "corrupted one (%s); host %s is suspect", step, name, rule, socket.gethostname())
            link = processor_link.current_or_none()
            if link is not None:
                link.report_sub_health(SDC_CODE)
        if me == next((h for h in dispute.holders if h not in corrupted), dispute.holders[0]):
            logger.warning("silent data corruption after step %d, recomputed: the %s shard of ranks %s: the "
                           "corrupted copy was rank(s) %s's (%s)", step, name, list(dispute.holders),
                           list(corrupted), rule)
