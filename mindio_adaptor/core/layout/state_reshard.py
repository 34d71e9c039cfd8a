"""Optimizer state moved in memory from one sharding to another (a scale-out: the survivors' state, cut
for the smaller data-parallel size, becomes the shards of the original size, the returned ranks' too).

The state is addressed by parameter. A rank holds, of each parameter it has a part of, one contiguous
range of the parameter's flattened elements, with a few tensors over that range (fp32 main param, Adam
moments): a distributed optimizer's shard is such a range per parameter, whatever the data-parallel size,
the replica count or the bucket boundaries. A `Span` describes one such range without its data; every
rank of a data-parallel group computes the same plan from the spans all of them hold and want, so the
plan needs no coordinator. The pieces between one pair of ranks travel as one buffer per dtype.
torch.distributed only."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Mapping, Sequence, Tuple

import torch
import torch.distributed as dist

Fields = Tuple[Tuple[str, str], ...]  # (tensor name, dtype) of every tensor over a range, sorted by name


class ReshardError(RuntimeError):
    pass


@dataclass(frozen=True)
class Span:
    """Elements [start, end) of one parameter, flattened, with the tensors kept over them."""
    start: int
    end: int
    fields: Fields


@dataclass(frozen=True)
class Piece:
    """Elements [start, end) of parameter `key`, sent by rank `src` to rank `dst` (a copy when equal)."""
    key: str
    start: int
    end: int
    src: int
    dst: int


@dataclass
class Slot:
    """A rank's own tensors over a span: `start` is the first element of the parameter they hold."""
    start: int
    tensors: Mapping[str, torch.Tensor]


def fields_of(tensors: Mapping[str, torch.Tensor]) -> Fields:
    return tuple(sorted((name, str(t.dtype)) for name, t in tensors.items()))


def spans_of(slots: Mapping[str, Slot]) -> Dict[str, Span]:
    """What a rank reports of its slots to its group: ranges and fields, no data."""
    spans = {}
    for key, slot in slots.items():
        sizes = {t.numel() for t in slot.tensors.values()}
        if len(sizes) != 1:
            raise ReshardError(f"{key}: the tensors over one range differ in size {sorted(sizes)}")
        spans[key] = Span(slot.start, slot.start + sizes.pop(), fields_of(slot.tensors))
    return spans


def plan_reshard(held: Mapping[int, Mapping[str, Span]], wanted: Mapping[int, Mapping[str, Span]]) -> List[Piece]:
    """Which rank sends which elements to which, so that every wanted span is filled. A rank that holds
    what it wants copies it; otherwise the holder that has sent the fewest elements so far sends, so the
    returned ranks' pieces are spread over the replicas. Deterministic: every rank computes the same plan."""
    holders: Dict[str, List[Tuple[int, Span]]] = defaultdict(list)
    for rank in sorted(held):
        for key, span in held[rank].items():
            if span.end > span.start:
                holders[key].append((rank, span))
    sent: Dict[int, int] = defaultdict(int)
    pieces = []
    for dst in sorted(wanted):
        for key in sorted(wanted[dst]):
            want = wanted[dst][key]
            position = want.start
            while position < want.end:
                src, span = _source(holders[key], key, position, want, dst, sent)
                end = min(want.end, span.end)
                pieces.append(Piece(key, position, end, src, dst))
                if src != dst:
                    sent[src] += end - position
                position = end
    return pieces


def _source(candidates, key: str, position: int, want: Span, dst: int, sent) -> Tuple[int, Span]:
    covering = [(rank, span) for rank, span in candidates if span.start <= position < span.end]
    if not covering:
        raise ReshardError(f"no rank holds element {position} of {key} (rank {dst} wants [{want.start}, "
                           f"{want.end}); held: {[(r, s.start, s.end) for r, s in candidates] or 'nowhere'})")
    rank, span = min(covering, key=lambda c: (c[0] != dst, sent[c[0]], c[0]))
    if span.fields != want.fields:
        raise ReshardError(f"{key}: rank {rank} holds {span.fields}, rank {dst} wants {want.fields}")
    return rank, span


def exchange(pieces: Sequence[Piece], me: int, held: Mapping[str, Slot], wanted: Mapping[str, Slot]) -> int:
    """Carry out this rank's part of the plan: local copies, then one buffer per peer and dtype each way,
    all posted at once. Returns the bytes this rank received from others. The waits are bounded by the
    process group's timeout."""
    outgoing: Dict[int, List[Piece]] = defaultdict(list)
    incoming: Dict[int, List[Piece]] = defaultdict(list)
    with torch.no_grad():
        for piece in pieces:
            if piece.src == me and piece.dst == me:
                for name, target in wanted[piece.key].tensors.items():
                    _view(target, wanted[piece.key].start, piece).copy_(
                        _view(held[piece.key].tensors[name], held[piece.key].start, piece))
            elif piece.src == me:
                outgoing[piece.dst].append(piece)
            elif piece.dst == me:
                incoming[piece.src].append(piece)
        sends = {dst: _packed(held, list_of) for dst, list_of in outgoing.items()}
        receives = {src: _empty_buffers(wanted, list_of) for src, list_of in incoming.items()}
        # One batch: with NCCL, a send and a receive between the same two ranks posted apart can wait on
        # each other (a survivor may both send and receive).
        ops = [dist.P2POp(dist.isend, buffer, dst, tag=tag) for dst, buffers in sorted(sends.items())
               for tag, buffer in enumerate(buffers.values())]
        ops += [dist.P2POp(dist.irecv, buffer, src, tag=tag) for src, buffers in sorted(receives.items())
                for tag, buffer in enumerate(buffers.values())]
        for request in dist.batch_isend_irecv(ops) if ops else []:
            request.wait()
        for src, buffers in receives.items():
            _unpack(wanted, incoming[src], buffers)
    return sum(b.numel() * b.element_size() for buffers in receives.values() for b in buffers.values())


def _view(tensor: torch.Tensor, start: int, piece: Piece) -> torch.Tensor:
    return tensor.view(-1)[piece.start - start:piece.end - start]


def _ordered(slots: Mapping[str, Slot], pieces: Sequence[Piece]):
    """(dtype, view) of every tensor of every piece, in the order both ends agree on."""
    for piece in pieces:
        slot = slots[piece.key]
        for name in sorted(slot.tensors):
            view = _view(slot.tensors[name], slot.start, piece)
            yield view.dtype, view


def _packed(slots, pieces) -> Dict[torch.dtype, torch.Tensor]:
    parts: Dict[torch.dtype, List[torch.Tensor]] = defaultdict(list)
    for dtype, view in _ordered(slots, pieces):
        parts[dtype].append(view)
    return {dtype: torch.cat(views) for dtype, views in sorted(parts.items(), key=lambda kv: str(kv[0]))}


def _empty_buffers(slots, pieces) -> Dict[torch.dtype, torch.Tensor]:
    sizes: Dict[torch.dtype, int] = defaultdict(int)
    device = {}
    for dtype, view in _ordered(slots, pieces):
        sizes[dtype] += view.numel()
        device[dtype] = view.device
    return {dtype: torch.empty(size, dtype=dtype, device=device[dtype])
            for dtype, size in sorted(sizes.items(), key=lambda kv: str(kv[0]))}


def _unpack(slots, pieces, buffers) -> None:
    offsets: Dict[torch.dtype, int] = defaultdict(int)
    for dtype, view in _ordered(slots, pieces):
        count = view.numel()
        view.copy_(buffers[dtype][offsets[dtype]:offsets[dtype] + count])
        offsets[dtype] += count


def gather(group, item) -> list:
    """`item` of every rank of `group`, in group order (a small object: spans, a step's state)."""
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, item, group=group)
    return everyone


def reshard_in_group(group, held: Mapping[str, Slot], wanted: Mapping[str, Slot]) -> Tuple[int, int]:
    """Fill `wanted` on every rank of `group` from what the ranks hold. Returns (pieces of the plan, bytes
    this rank received)."""
    me = dist.get_rank()
    reports = gather(group, (me, spans_of(held), spans_of(wanted)))
    pieces = plan_reshard({rank: h for rank, h, _ in reports}, {rank: w for rank, _, w in reports})
    return len(pieces), exchange(pieces, me, held, wanted)
