"""The training-loop decorator: classify an exception, report it, wait for the controller's decision,
and run the step again after an online repair."""
from __future__ import annotations

import functools
import logging
import os
from typing import Callable, List, Optional, Tuple

from mindio_adaptor.core.detection import faults
from mindio_adaptor.core.detection.faults import fault_code_of, report_state_of
from mindio_adaptor.ttp import controller, processor
from mindio_adaptor.ttp.enums import Action, ReportState

logger = logging.getLogger(__name__)

# The table lives in core/detection/faults.py (one source of truth for every device); these names stay for
# callers of the reference face. _user_patterns IS the process-wide table's user list: clearing it
# clears the registered patterns.
BUILTIN_PATTERNS: List[Tuple[str, ReportState]] = [(r.text, r.state) for r in faults.BUILTIN_RULES]
_user_patterns: List[faults.FaultRule] = faults.DEFAULT.user_rules


def tft_register_exception_handler(pattern: str, report_state_name: str, handle: Optional[Callable] = None) -> None:
    """Classify errors whose text contains `pattern` as ReportState[report_state_name]. `handle`, when
    given, is called with the error's text before the report, as the reference calls it; its answer
    names the state reported (report_state_of)."""
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
    (core/detection/faults.py: first match wins, user patterns first; RuntimeErrors in the exception's
    cause chain are matched, as the reference matches RuntimeErrors). "HBM MULTI BIT ECC" is reported
    as UCE: telling UCE_CORRUPTED apart needs the device's error timestamp, which no backend gives us yet."""
    result = faults.classify_exception(exc)
    return result.state, result.handle


def tft_exception_handler(train_func: Callable) -> Callable:
    """Run `train_func` again after each online repair; exit when the controller decides so.

    The call's positional arguments become one list, which every handler receives as `args` unless
    tft_set_step_args named other ones; each retry calls `train_func(*that_list)`, so what a handler
    assigned into it (args[1] = rebuilt_model) is what training goes on with. When `train_func`
    returns, the processor (and a controller running in this process, unless the cluster manager
    MindX owns it: MINDX_TASK_ID set) is destroyed, as the reference does at a normal end."""

    @functools.wraps(train_func)
    def wrapper(*args, **kwargs):
        call_args = list(args)
        processor.set_decorated_args(call_args)
        while True:
            try:
                result = train_func(*call_args, **kwargs)
            except Exception as exc:
                state = report_state_of(exc)
                logger.warning("training raised %s: %s (reported as %s)", type(exc).__name__, exc, state.name)
                processor.tft_report_error(state, fault_code_of(exc))
                if processor.tft_wait_next_action() == Action.RETRY:
                    continue
                raise SystemExit(f"the controller ended training ({processor.tft_get_repair_type()} "
                                 f"at step {processor.tft_get_repair_step()}) after: {exc}") from exc
            _destroy_at_normal_end()
            return result

    return wrapper


def _destroy_at_normal_end() -> None:
    # The processor first, so that its goodbye reaches the controller ("rank R left", no fault).
    processor.tft_destroy_processor()
    if controller.tft_query_high_availability_switch() and os.environ.get("MINDX_TASK_ID") is None:
        controller.tft_destroy_controller()
