"""What the fingerprints of one optimizer shard's R holders say, and, once the disputed step was
recomputed, which holder's copy was the corrupted one (pure; core/layout/shard_fingerprint makes the prints).

After a disagreement nobody's state is trusted: a corrupted value is used by its holder's next update
and, through the model parameters it all-gathers, by every rank's gradients. So the job recomputes from
its last checkpoint (whose step was checked before it was written). When the recomputation passes the
disputed step again, the copies the holders held then are judged against the recomputed one:

1. a holder whose earlier copy equals the recomputed one exactly held a good copy, and every holder that
   did not held a corrupted one;
2. otherwise (the corrupted value fed the common gradients, so no earlier copy is exact any more) only the
   elements where the holders' copies differed from each other are looked at: a holder's distance is the
   sum of its earlier values' absolute differences from the recomputed ones there (a NaN or an infinity
   counts as infinitely far). The holders at the largest distance held a corrupted copy when it is at
   least FAR_FACTOR times the smallest one;
3. otherwise no copy can be told from another, and every holder is suspect.

The rule needs no majority, so it holds with R = 2; with R >= 3 the majority at the time of the dispute
is reported beside it."""
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from mindio_adaptor.core.layout.shard_fingerprint import Fingerprint

Prints = Sequence[Fingerprint]
FAR_FACTOR = 10.0


@dataclass(frozen=True)
class Disagreement:
    step: int
    holders: Tuple[int, ...]  # global ranks, in the peer group's order
    prints: Tuple[Tuple[Fingerprint, ...], ...]  # each holder's, in the same order
    tensors: Tuple[int, ...]  # positions in the shard whose fingerprints differ

    @property
    def majority(self) -> Tuple[int, ...]:
        """The holders sharing the copy that more than half of them hold (none with a tie)."""
        counts: Dict[tuple, List[int]] = {}
        for holder, prints in zip(self.holders, self.prints):
            counts.setdefault(prints, []).append(holder)
        best = max(counts.values(), key=len)
        return tuple(best) if 2 * len(best) > len(self.holders) else ()

    def exact_copies(self, recomputed: Prints) -> Tuple[int, ...]:
        """The holders whose copy at the disputed step equals the recomputed one (rule 1)."""
        return tuple(h for h, prints in zip(self.holders, self.prints) if prints == tuple(recomputed))


def compare_holders(step: int, holders: Sequence[int], prints: Sequence[Prints]) -> Optional[Disagreement]:
    """None when every holder's fingerprints equal the first holder's."""
    prints = [tuple(p) for p in prints]
    longest = max(len(p) for p in prints)
    differing = tuple(i for i in range(longest) if len({p[i] if i < len(p) else None for p in prints}) > 1)
    if not differing:
        return None
    return Disagreement(step, tuple(holders), tuple(prints), differing)


def judge_copies(dispute: Disagreement, recomputed_prints: Prints,
                 earlier: Sequence[Mapping[int, torch.Tensor]],
                 recomputed: Mapping[int, torch.Tensor]) -> Tuple[Tuple[int, ...], str]:
    """(the holders whose copy was corrupted, the rule that decided it). `earlier` holds each holder's
    disputed tensors (by position in the shard) at the dispute, in dispute.holders' order; `recomputed`
    the same tensors recomputed."""
    exact = dispute.exact_copies(recomputed_prints)
    if exact:
        return tuple(h for h in dispute.holders if h not in exact), "equal to the recomputed copy"
    distances = [0.0] * len(dispute.holders)
    for position in dispute.tensors:
        copies = [held[position].reshape(-1).double() for held in earlier]
        apart = torch.zeros_like(copies[0], dtype=torch.bool)
        for copy in copies[1:]:
            apart |= copy != copies[0]  # NaN differs from everything
        truth = recomputed[position].reshape(-1).double()
        for i, copy in enumerate(copies):
            gap = (copy[apart] - truth[apart]).abs()
            distances[i] += float("inf") if not torch.isfinite(gap).all() else float(gap.sum())
    farthest, nearest = max(distances), min(distances)
    if farthest > 0 and farthest >= FAR_FACTOR * nearest:
        return (tuple(h for h, d in zip(dispute.holders, distances) if d == farthest),
                f"farthest from the recomputed values where the copies differ ({_distances(dispute, distances)})")
    return dispute.holders, f"no copy is {FAR_FACTOR:g}x farther than another ({_distances(dispute, distances)})"


def _distances(dispute: Disagreement, distances: List[float]) -> str:
    return ", ".join(f"rank {h}: {d:.3g}" for h, d in zip(dispute.holders, distances))
