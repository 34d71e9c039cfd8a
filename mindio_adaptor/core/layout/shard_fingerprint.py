"""A fingerprint of an optimizer shard, computed where the shard lives (no copy to the host): per
tensor, its size in bytes, the sum of its 32-bit words and a position-weighted sum of them, each
modulo the Mersenne prime 2^31 - 1.

Integer sums do not depend on the order of the reduction, so the same bytes give the same fingerprint
on every device and in every run, and the holders of a shard can compare theirs exactly. A flipped bit
changes its word by 2^k (k < 32), never a multiple of the prime, so it always changes the plain sum;
two words swapped change the weighted sum. A check against hardware faults, not against an adversary.

The words are summed as int64 in rows of ROW words: a row's weighted sum stays below 2^59 (words below
2^31, weights up to 2^14), and every partial result is reduced modulo the prime before it is combined.
At most BLOCK words are widened at a time, so the extra memory is bounded whatever the shard's size."""
from typing import List, Sequence, Tuple

import torch

PRIME = (1 << 31) - 1
ROW = 1 << 14
BLOCK = 64 * ROW

Fingerprint = Tuple[int, int, int]  # (bytes, sum of words, weighted sum of words)


def _words(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as 32-bit words (as bytes when their count is no multiple of 4)."""
    raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    return raw.view(torch.int32) if raw.numel() % 4 == 0 else raw


def fingerprint(tensor: torch.Tensor) -> Fingerprint:
    return _fingerprint_of_words(_words(tensor))


def _fingerprint_of_words(words: torch.Tensor) -> Fingerprint:
    weights = _column_weights(words.device)
    total = weighted = 0
    for start in range(0, words.numel(), BLOCK):
        block = words[start:start + BLOCK].to(torch.int64)
        whole = block.numel() // ROW * ROW
        first_row = start // ROW
        if whole:
            rows = block[:whole].view(-1, ROW)
            row_weight = torch.arange(first_row + 1, first_row + 1 + rows.shape[0], dtype=torch.int64,
                                      device=words.device)
            total += int(rows.sum(dim=1).remainder(PRIME).sum())
            sums = (rows * weights).sum(dim=1).remainder(PRIME)
            weighted += int((sums * row_weight.remainder(PRIME)).remainder(PRIME).sum())
        tail = block[whole:]
        if tail.numel():  # the last, shorter row: as if padded with zero words, without the padding's work
            total += int(tail.sum()) % PRIME
            weighted += (int((tail * weights[:tail.numel()]).sum()) % PRIME) * ((first_row + whole // ROW + 1) % PRIME)
    return words.numel() * words.element_size(), total % PRIME, weighted % PRIME


_WEIGHTS = {}


def _column_weights(device) -> torch.Tensor:
    if device not in _WEIGHTS:
        _WEIGHTS[device] = torch.arange(1, ROW + 1, dtype=torch.int64, device=device)
    return _WEIGHTS[device]


def fingerprints(tensors: Sequence[torch.Tensor]) -> List[Fingerprint]:
    return [fingerprint(t) for t in tensors]


def grouped_fingerprints(tensors: Sequence[torch.Tensor]) -> List[Fingerprint]:
    """Fingerprints of the tensors' words laid end to end, in groups of at most BLOCK words (a tensor of more, or
    of a byte count no multiple of 4, alone): what tells whether two holders' shards are equal, at the cost of a
    few tensor operations per group where fingerprints() pays them per tensor (an optimizer shard is many small
    tensors: 17 ms a check on the tiny job's, measured). Two shards of tensors of the same shapes are grouped
    alike. Which tensors differ, fingerprints() tells."""
    prints, group, grouped = [], [], 0
    for tensor in tensors:
        words = _words(tensor)
        if words.dtype != torch.int32 or words.numel() > BLOCK:
            prints.append(_fingerprint_of_words(words))
            continue
        if grouped + words.numel() > BLOCK:
            prints.append(_fingerprint_of_words(torch.cat(group)))
            group, grouped = [], 0
        group.append(words)
        grouped += words.numel()
    if group:
        prints.append(_fingerprint_of_words(torch.cat(group)))
    return prints
