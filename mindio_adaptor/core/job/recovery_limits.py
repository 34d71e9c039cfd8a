"""How long the processor side of a recovery waits, from the environment, checked at connect so that
a bad value stops the start instead of the first recovery."""
from mindio_adaptor.core.process.env_values import seconds_from_env

STOP_TIMEOUT_ENV = "MINDIO_STOP_TIMEOUT_S"
REBUILD_TIMEOUT_ENV = "MINDIO_REBUILD_TIMEOUT_S"
DEFAULT_STOP_TIMEOUT_S = 30.0
DEFAULT_REBUILD_TIMEOUT_S = 60.0
# The controller's action time limit ends a stuck stage first; these only keep a wait from being endless.
STAGE_TIMEOUT_S = 30 * 60.0
DECISION_TIMEOUT_S = 30 * 60.0  # the reference's longest wait: a dump may take that long


def stop_timeout_s() -> float:
    """How long a STOP waits for the training thread to park before calling it hung."""
    return seconds_from_env(STOP_TIMEOUT_ENV, DEFAULT_STOP_TIMEOUT_S, 1, 1800)


def rebuild_timeout_s() -> float:
    """How long a member waits for the others to arrive at a rebuild. Every member is known alive
    when the controller asks for it (a replacement has registered), so a missing one died since: a
    second fault, which should fall back to the dump without waiting long."""
    return seconds_from_env(REBUILD_TIMEOUT_ENV, DEFAULT_REBUILD_TIMEOUT_S, 1, 3600)
