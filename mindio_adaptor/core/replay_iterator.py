"""A data iterator that can give the items of the interrupted step again.

An online repair recomputes the step a fault interrupted, with the same micro-batches: the iterator
records what it yields during a step, and `rewind()` makes it yield those again, in order, before
continuing with the underlying iterator.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Deque, Iterator, List


class ReplayableIterator:
    def __init__(self, inner: Iterator):
        self.inner = inner
        self._step_items: List[Any] = []
        self._replay: Deque[Any] = deque()

    def __iter__(self):
        return self

    def __next__(self):
        item = self._replay.popleft() if self._replay else next(self.inner)
        self._step_items.append(item)
        return item

    def begin_step(self) -> None:
        """A new step starts: what the last one consumed is no longer needed."""
        self._step_items = []

    def rewind(self) -> int:
        """Yield the current step's items again (before anything not yet replayed); returns how many."""
        self._replay.extendleft(reversed(self._step_items))
        count = len(self._step_items)
        self._step_items = []
        return count
