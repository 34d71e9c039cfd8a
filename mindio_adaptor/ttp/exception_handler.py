"""The training-loop decorator: classify an exception, report it, wait for the controller's decision,
and run the step again after an online repair."""
from __future__ import annotations

import functools
import logging
from typing import Callable, List, Optional, Tuple

from mindio_adaptor.core import faults
from mindio_adaptor.ttp import processor
from mindio_adaptor.ttp.enums import Action, ReportState

logger = logging.getLogger(__name__)

# The table lives in core/faults.py (one source of truth for every device); these names stay for
# callers of the reference face. _user_patterns IS the process-wide table's user list: clearing it
# clears the registered patterns.
BUILTIN_PATTERNS: List[Tuple[str, ReportState]] = [(r.text, r.state) for r in faults.BUILTIN_RULES]
_user_patterns: List[faults.FaultRule] = faults.DEFAULT.user_rules


def tft_register_exception_handler(pattern: str, report_state_name: str, handle: Optional[Callable] = None) -> None:
    """Classify errors whose text contains `pattern` as ReportState[report_state_name]; `handle(exc)`,
    when given, is called before the report."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("tft_register_exception_handler: pattern must be a non-empty string")
    try:
        state = ReportState[report_state_name]
    except KeyError:
        raise ValueError(f"tft_register_exception_handler: unknown report state {report_state_name!r}; "
                         f"known: {', '.join(s.name for s in ReportState)}") from None
    if handle is not None and not callable(handle):
        raise TypeError("tft_register_exception_handler: handle must be callable or None")
    faults.DEFAULT.add_pattern(pattern, state, handle, source="tft_register_exception_handler")


def classify(exc: BaseException) -> Tuple[ReportState, Optional[Callable]]:
    """The report state for an exception and the handle registered with the matching pattern
    (core/faults.py: first match wins, user patterns first; RuntimeErrors in the exception's
    cause chain are matched, as the reference matches RuntimeErrors). "HBM MULTI BIT ECC" is reported
    as UCE: telling UCE_CORRUPTED apart needs the device's error timestamp, which no backend gives us yet."""
    result = faults.classify_exception(exc)
    return result.state, result.handle


def fault_code_of(exc: BaseException) -> str:
    """The device fault code an exception carries in its `fault_code` attribute (ours: set by the
    code that raised it, e.g. a device-error translator), or "" for none; the controller's fault
    policy acts on it."""
    code = getattr(exc, "fault_code", "")
    return code if isinstance(code, str) else ""


def tft_exception_handler(train_func: Callable) -> Callable:
    """Run `train_func` again after each online repair; exit when the controller decides so."""

    @functools.wraps(train_func)
    def wrapper(*args, **kwargs):
        while True:
            try:
                return train_func(*args, **kwargs)
            except Exception as exc:
                state, handle = classify(exc)
                logger.warning("training raised %s: %s (reported as %s)", type(exc).__name__, exc, state.name)
                if handle is not None:
                    handle(exc)
                processor.tft_report_error(state, fault_code_of(exc))
                if processor.tft_wait_next_action() == Action.RETRY:
                    continue
                raise SystemExit(f"the controller ended training ({processor.tft_get_repair_type()} "
                                 f"at step {processor.tft_get_repair_step()}) after: {exc}") from exc

    return wrapper
