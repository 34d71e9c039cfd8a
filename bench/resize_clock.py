"""When a resize (elastic training's scale-in or scale-out) was decided, logged and first trained after, as
bench/scale_in.py and bench/scale_out.py read a run's lines: arrival times on this process's clock."""
import re
import sys
import time

ITERATION = re.compile(r"iteration\s+(\d+)/")


class ResizeClock:
    """Arrival times: the controller's decision (`decided_text`), rank 0's line that the resize is done
    (`done_text`), and the first step logged after it."""

    def __init__(self, decided_text: str, done_text: str):
        self.decided_text, self.done_text = decided_text, done_text
        self.seen = {}

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if self.decided_text in line:
            self.seen.setdefault("decided", now)
        elif self.done_text in line:
            self.seen.setdefault("done", now)
        elif ITERATION.search(line) and "done" in self.seen:
            self.seen.setdefault("first_step", now)

    def between(self, a: str, b: str) -> float:
        if a not in self.seen or b not in self.seen:
            sys.exit(f"did not see {a!r} and {b!r} in the run (seen {sorted(self.seen)})")
        return self.seen[b] - self.seen[a]
