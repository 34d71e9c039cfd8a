"""A data iterator that can give the items of the interrupted step again.

An online repair recomputes the step a fault interrupted, with the same micro-batches: the iterator
records what it yields during a step, and `position_after(repair_step)` makes it yield those again,
in order, before continuing with the underlying iterator, when the interrupted step is the one after
the repair step. When the interrupted step is the repair step itself (completed by other ranks), its
items stay consumed.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Deque, Iterator, List, Optional


class ReplayableIterator:
    def __init__(self, inner: Iterator):
        self.inner = inner
        self._step_items: List[Any] = []
        self._replay: Deque[Any] = deque()
        self.step: Optional[int] = None  # the step whose items _step_items holds

    def __iter__(self):
        return self

    def __next__(self):
        item = self._replay.popleft() if self._replay else next(self.inner)
        self._step_items.append(item)
        return item

    def begin_step(self, step: int) -> None:
        """Step `step` starts (or starts again): what an earlier step consumed is no longer needed."""
        self._step_items = []
        self.step = step

    def restart(self, inner: Iterator, step: int) -> None:
        """Continue from another source (positioned after `step`), forgetting every recorded item."""
        self.inner = inner
        self._step_items, self._replay = [], deque()
        self.step = step

    def position_after(self, repair_step: int) -> int:
        """Make the next item the first of step repair_step + 1; returns how many items are replayed."""
        if self.step == repair_step + 1:
            return self.rewind()
        if self.step == repair_step:
            self._step_items = []
            return 0
        raise ValueError(f"the data iterator is in step {self.step}; it cannot be positioned after step "
                         f"{repair_step}")

    def rewind(self) -> int:
        """Yield the current step's items again (before anything not yet replayed); returns how many."""
        self._replay.extendleft(reversed(self._step_items))
        count = len(self._step_items)
        self._step_items = []
        return count
