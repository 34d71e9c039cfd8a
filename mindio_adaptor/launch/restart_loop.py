"""A restart loop is a fault, not a routine: a rank whose processes started again alone (worker reboot) keep
dying the same way soon after their start is not started again a fourth time.

"The same way": the same return code, one the process produced itself (an exit code, or a signal of its own
such as SIGSEGV or SIGABRT); SIGKILL, SIGTERM, SIGINT and SIGHUP come from outside (an operator, a fault, the
launcher) and are no loop however often they come. "Soon": within QUICK_EXIT_S of the start, which is a
failed start or join on a loaded host, not a process that trained and crashed later. LOOP_LENGTH such ends
in a row stop the rank's reboots, one line naming the cause; the launcher then does what it does once a
rank's reboots are used up (a group restart while those remain, else the job fails).

Why 3: one quick failure is the fault's own aftermath (a peer dying at the same moment), a second can still
be a recovery the replacement raced; a third the same way is a cause that the next start will meet again. In
the chaos soak of issue 30 a replacement given a dead store's address died 0.2 s into its start 50 times,
about 5 s apart, until --max-restarts ran out; with 3 the launcher ends that after some 15 s.
"""
from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Optional

from mindio_adaptor.core.detection.exit_codes import describe

LOOP_LENGTH = 3
QUICK_EXIT_S = 120.0
FROM_OUTSIDE = {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def _its_own(code: int) -> bool:
    """A failure the process produced itself (negative codes: the signal that killed it)."""
    return code > 0 or code < 0 and -code not in FROM_OUTSIDE


@dataclass
class RestartLoop:
    """The run of quick, same ends of one rank's processes started again alone."""
    code: Optional[int] = None
    count: int = 0
    within_s: float = 0.0  # the longest life among them

    def ended(self, code: int, lived_s: float, alone: bool) -> None:
        """A process of the rank ended with `code` after `lived_s` seconds; `alone`: it was started again alone."""
        if not (alone and _its_own(code) and lived_s < QUICK_EXIT_S):
            self.code, self.count, self.within_s = None, 0, 0.0
            return
        if code != self.code:
            self.code, self.count, self.within_s = code, 0, 0.0
        self.count += 1
        self.within_s = max(self.within_s, lived_s)

    def stuck(self) -> bool:
        return self.count >= LOOP_LENGTH

    def cause(self) -> str:
        return (f"restart loop: its last {self.count} processes started again alone each ended with "
                f"{describe(self.code)} within {self.within_s:.1f} s of their start")
