"""The launcher's log: one line per event on stderr, each naming the node, so that the logs of several
launchers (one per node) can be merged and still read."""
import logging
import sys

LOGGER_NAME = "mindio_adaptor.launch"


def configure(node_rank) -> logging.Logger:
    """`[mindio-launch HH:MM:SS.mmm node R] message` (`node standby` for a spare yet to take a node); configured once per process (the last node rank wins,
    which matters only in tests that run several launchers in one process)."""
    logger = logging.getLogger(LOGGER_NAME)
    if not logger.handlers:
        logger.addHandler(logging.StreamHandler(sys.stderr))
        logger.setLevel(logging.INFO)
        logger.propagate = False
    logger.handlers[0].setFormatter(logging.Formatter(
        f"[mindio-launch %(asctime)s.%(msecs)03d node {node_rank}] %(message)s", "%H:%M:%S"))
    return logger
