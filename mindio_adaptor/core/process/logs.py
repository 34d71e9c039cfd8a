"""One log format for the adaptor: what happened, with rank and time (callers add the step)."""
import logging
import os
import sys

LOGGER_NAME = "mindio_adaptor"
_configured = False


class _RankFormatter(logging.Formatter):
    """The rank is read when a line is written, not when logging is set up: a warm worker
    (launch/warm_worker.py) sets up logging before it knows which rank it will be."""

    def __init__(self, rank):
        super().__init__("[mindio %(asctime)s.%(msecs)03d rank %(rank)s] %(levelname)s %(message)s", "%H:%M:%S")
        self._rank = rank

    def format(self, record):
        record.rank = os.environ.get("RANK", "?") if self._rank is None else self._rank
        return super().format(record)


def configure(rank=None):
    """Send the adaptor's logs to stderr as `[mindio HH:MM:SS.mmm rank R] LEVEL message`, once per process.
    Level from MINDIO_LOG_LEVEL (default INFO)."""
    global _configured
    if _configured:
        return
    _configured = True
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_RankFormatter(rank))
    root = logging.getLogger(LOGGER_NAME)
    root.addHandler(handler)
    root.setLevel(os.environ.get("MINDIO_LOG_LEVEL", "INFO").upper())
    root.propagate = False
