"""Which ReportState a training failure is, on every device: the single table the exception handler,
the patches and the tests share (reference-system.md §5).

Rules are substrings of the error text, tried in order, first match wins:
1. user rules (add_pattern / tft_register_exception_handler), in registration order;
2. the built-in text rules below, in this order: the reference's Ascend texts, CUDA device errors
   (memory first, then fatal device errors), then communication errors (NCCL, gloo). Device texts come
   before communication texts on purpose: NCCL embeds the CUDA error that broke it ("Cuda failure 'an
   illegal memory access was encountered'"), and the device fault is the cause to act on;
3. the built-in type rules (torch.distributed's DistBackendError, DistNetworkError, DistStoreError are
   communication failures whatever their text), matched by class name so torch is not imported here.
Nothing matched: UNKNOWN, which the controller treats as "dump and exit".

As in the reference, only RuntimeErrors (torch's DistError, AcceleratorError and OutOfMemoryError are
subclasses) are matched against text; an exception is classified through its chain -- itself, then its
__cause__, else its __context__ unless suppressed, as Python's traceback walks it -- so a wrapper raised
while handling a NCCL error is still a communication failure. For each rule every exception of the
chain is tried, so a user rule beats a built-in one wherever each matches.

Where each built-in text comes from is recorded beside it (`source`). The gloo texts were observed with
torch 2.13.0+cpu on a 2-process job (a peer exiting, killed, or sleeping past a 3 s timeout); the NCCL
and CUDA texts are data from torch's c10d sources, NCCL's and CUDA's documentation (no GPU here).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterator, List, NamedTuple, Optional, Tuple, Union

from mindio_adaptor.core.detection.enums import ReportState

logger = logging.getLogger(__name__)


class FaultRule(NamedTuple):
    text: str
    state: ReportState
    source: str
    handle: Optional[Callable[[BaseException], None]] = None


def _rules(state: ReportState, source: str, *texts: str) -> Tuple[FaultRule, ...]:
    return tuple(FaultRule(text, state, source) for text in texts)


_REFERENCE = "reference adaptor (reference-system.md §5)"
_CUDA = "cudaGetErrorString texts as torch prints them ('CUDA error: ...'), CUDA runtime API docs"
_NCCL = "torch c10d NCCLUtils getNcclErrorDetailStr / ProcessGroupNCCL, NCCL ncclResult_t docs"
_OURS = "mindio_adaptor.patches.silent_corruption (the holders of an optimizer shard disagree)"
_GLOO = "observed: torch 2.13.0+cpu, gloo, 2 processes (tests/unit/test_faults.py)"

_S = ReportState
BUILTIN_RULES: Tuple[FaultRule, ...] = (
    _rules(_S.UCE, _REFERENCE, "UCE ERROR", "HBM MULTI BIT ECC")
    # Raised on every rank when the holders of an optimizer shard disagree: nobody's state is trusted.
    + _rules(_S.UCE, _OURS, "SDC ERROR")
    + _rules(_S.NORMAL, _REFERENCE, "FORCE STOP")  # this rank was stopped on purpose (prelock)
    + _rules(_S.PREREPAIR_FINISH, _REFERENCE, "ARF FINISH")
    + _rules(_S.STEP_FINISH, _REFERENCE, "STEP FINISH")
    + _rules(_S.HCCL_FAILED, _REFERENCE, "HCCL OP RETRY FAILED", "SUSPECT REMOTE ERROR", "UB LINK ERROR",
             "HCCS LINK ERROR")
    # Xid 48 (DBE), 63/64 (row remapping), 94 (contained ECC): the memory is bad, the rank's state is not.
    + _rules(_S.UCE, _CUDA, "uncorrectable ECC error encountered")
    # Fatal, sticky device errors (Xid 13/31/43/74/79/95 class): the CUDA context is unusable until the
    # process restarts, so neither a retry nor a link rebuild helps. NVLink is the analogue of HCCS, but
    # unlike HCCS LINK ERROR its CUDA error poisons the context, hence UNKNOWN, not HCCL_FAILED.
    + _rules(_S.UNKNOWN, _CUDA, "an illegal memory access was encountered", "unspecified launch failure",
             "an illegal instruction was encountered", "hardware stack error",
             "uncorrectable NVLink error detected", "contained by the GPU's error containment capability")
    + _rules(_S.HCCL_FAILED, _NCCL, "ncclSystemError", "ncclRemoteError", "ncclUnhandledCudaError",
             "ncclInternalError", "NCCL communicator was aborted",
             "Watchdog caught collective operation timeout", "Some NCCL operations have failed or timed out")
    + _rules(_S.HCCL_FAILED, _GLOO, "Connection closed by peer", "Connection reset by peer",
             "for recv operation to complete", "for send operation to complete")
)
del _S

# Class names (anywhere in the MRO) that mean a communication failure whatever the text says.
BUILTIN_TYPE_RULES: Tuple[Tuple[str, ReportState], ...] = (
    ("DistBackendError", ReportState.HCCL_FAILED),  # raised by ProcessGroupNCCL/Gloo for backend errors
    ("DistNetworkError", ReportState.HCCL_FAILED),  # store socket failures
    ("DistStoreError", ReportState.HCCL_FAILED),    # store waits timing out: a peer never arrived
)


@dataclass(frozen=True)
class Classification:
    state: ReportState
    rule: Optional[FaultRule] = None         # None: a type rule matched, or nothing (UNKNOWN)
    matched: Optional[BaseException] = None  # the exception of the chain that matched

    @property
    def handle(self) -> Optional[Callable[[BaseException], None]]:
        return None if self.rule is None else self.rule.handle


def exception_chain(exc: BaseException, limit: int = 32) -> Iterator[BaseException]:
    """exc, then its cause (or unsuppressed context), as Python's traceback prints them; cycle-safe."""
    seen = set()
    while exc is not None and id(exc) not in seen and len(seen) < limit:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ if exc.__cause__ is not None else (
            None if exc.__suppress_context__ else exc.__context__)


def _to_state(state: Union[ReportState, str, int]) -> ReportState:
    if isinstance(state, ReportState):
        return state
    if isinstance(state, str):
        try:
            return ReportState[state]
        except KeyError:
            raise ValueError(f"unknown report state {state!r}; known: "
                             f"{', '.join(s.name for s in ReportState)}") from None
    return ReportState(state)


# Besides the patterns themselves, the keys the reference's own handles answer with (its HBM handle
# tells a repairable memory error from a corrupting one; "OTHER" is its "nothing known").
REFERENCE_RESULT_KEYS = {"OTHER": ReportState.UNKNOWN, "HBM MULTI BIT ECC can repair": ReportState.UCE,
                         "HBM MULTI BIT ECC can't repair": ReportState.UCE_CORRUPTED}


class FaultClassifier:
    """An ordered rule table. `user_rules` is a plain list so callers may inspect or clear it."""

    def __init__(self, builtin_rules=BUILTIN_RULES, type_rules=BUILTIN_TYPE_RULES):
        self.user_rules: List[FaultRule] = []
        self.builtin_rules = tuple(builtin_rules)
        self.type_rules = tuple(type_rules)

    def add_pattern(self, text: str, state: Union[ReportState, str, int],
                    handle: Optional[Callable[[BaseException], None]] = None, source: str = "user") -> FaultRule:
        """Classify errors containing `text` as `state` (a ReportState or its name), before every
        built-in rule and after the user rules added earlier."""
        if not isinstance(text, str) or not text:
            raise ValueError("fault pattern must be a non-empty string")
        if handle is not None and not callable(handle):
            raise TypeError("fault pattern handle must be callable or None")
        rule = FaultRule(text, _to_state(state), source, handle)
        self.user_rules.append(rule)
        return rule

    def state_of_key(self, key) -> Optional[ReportState]:
        """The report state a pattern handle's answer names: the pattern `key` (registered last wins,
        as re-registering a pattern replaces its state in the reference's table), a built-in pattern,
        or one of REFERENCE_RESULT_KEYS; None for anything else."""
        if not isinstance(key, str):
            return None
        for rule in [*reversed(self.user_rules), *self.builtin_rules]:
            if rule.text == key:
                return rule.state
        return REFERENCE_RESULT_KEYS.get(key)

    def classify_text(self, text: str) -> Classification:
        for rule in self._text_rules():
            if rule.text in text:
                return Classification(rule.state, rule)
        return Classification(ReportState.UNKNOWN)

    def classify(self, exc: BaseException) -> Classification:
        chain = list(exception_chain(exc))
        texts = [(e, str(e)) for e in chain if isinstance(e, RuntimeError)]
        for rule in self._text_rules():
            for err, text in texts:
                if rule.text in text:
                    return Classification(rule.state, rule, err)
        for name, state in self.type_rules:
            for err in chain:
                if any(cls.__name__ == name for cls in type(err).__mro__):
                    return Classification(state, None, err)
        return Classification(ReportState.UNKNOWN)

    def _text_rules(self) -> Iterator[FaultRule]:
        yield from list(self.user_rules)  # a copy: a handler may register patterns while we iterate
        yield from self.builtin_rules


# The process-wide table: the exception handler and tft_register_exception_handler use this one.
DEFAULT = FaultClassifier()


def add_pattern(text: str, state: Union[ReportState, str, int],
                handle: Optional[Callable[[BaseException], None]] = None) -> FaultRule:
    return DEFAULT.add_pattern(text, state, handle)


def classify_text(text: str) -> Classification:
    return DEFAULT.classify_text(text)


def classify_exception(exc: BaseException) -> Classification:
    return DEFAULT.classify(exc)


def report_state_of(exc: BaseException) -> ReportState:
    """The state to report for `exc`. A matching pattern's handle is called with the text of the
    exception that matched (str(e), as the reference calls it). Its answer is a key of the pattern
    table (FaultClassifier.state_of_key), whose state is reported; None (ours: a handle that only
    observes) keeps the pattern's own state. Any other answer is a mistake in the handle: it is logged
    and the fault reported as UNKNOWN (the reference fails on it with a KeyError)."""
    result = classify_exception(exc)
    if result.handle is None:
        return result.state
    text = str(result.matched if result.matched is not None else exc)
    try:
        key = result.handle(text)
    except Exception:
        logger.exception("the handle of pattern %r raised; reporting the pattern's state %s",
                         result.rule.text, result.state.name)
        return result.state
    if key is None:
        return result.state
    state = DEFAULT.state_of_key(key)
    if state is None:
        logger.error("the handle of pattern %r answered %r, which is no pattern of the table (nor OTHER); "
                     "reporting UNKNOWN", result.rule.text, key)
        return ReportState.UNKNOWN
    return state


def fault_code_of(exc: BaseException) -> str:
    """The device fault code an exception carries in its `fault_code` attribute (ours: set by the
    code that raised it, e.g. a device-error translator), or "" for none; the controller's fault
    policy acts on it."""
    code = getattr(exc, "fault_code", "")
    return code if isinstance(code, str) else ""
