"""One log format for the adaptor: what happened, with rank and time (callers add the step)."""
import logging
import os
import sys

LOGGER_NAME = "mindio_adaptor"
_configured = False


def configure(rank=None):
    """Send the adaptor's logs to stderr as `[mindio HH:MM:SS.mmm rank R] LEVEL message`, once per process.
    Level from MINDIO_LOG_LEVEL (default INFO)."""
    global _configured
    if _configured:
        return
    _configured = True
    rank = os.environ.get("RANK", "?") if rank is None else rank
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        f"[mindio %(asctime)s.%(msecs)03d rank {rank}] %(levelname)s %(message)s", "%H:%M:%S"))
    root = logging.getLogger(LOGGER_NAME)
    root.addHandler(handler)
    root.setLevel(os.environ.get("MINDIO_LOG_LEVEL", "INFO").upper())
    root.propagate = False
