"""Who handles a fault in a job with --enable-high-availability, chosen once by `patch_all`.

"adaptor" (the default): the patches connect every rank to the controller, run train_step inside their
own exception loop and answer the controller's actions with the recovery stages (recovery/flows).

"client": a framework adaptor written for the reference API does that itself, as MindSpeed-LLM does:
it starts the controller and processors (mindio_ttp.framework_ttp), registers its handlers, reports
the layout, brackets the updates and decorates train() with tft_exception_handler. The patches still
give it what it cannot do on its own (the CPU device layer, the replicated optimizer layout, the
record of each completed step, the data replay, the stages its handlers call through
recovery/client_actions), but never connect, never catch a training exception and never answer an
action. The mode must be known before Megatron initialises: in the adaptor mode the patches connect
at initialisation, which a client's own tft_init_processor would then find taken.
"""
ADAPTOR, CLIENT = "adaptor", "client"
MODES = (ADAPTOR, CLIENT)

_mode = ADAPTOR
_in_force = False  # Megatron initialised under the mode: it can no longer change


def select(mode: str) -> None:
    """Until Megatron initialises the mode may change: a warm worker (launch/warm_worker.py) applies the
    patches before it knows the script, which then calls patch_all with its own mode."""
    global _mode
    if mode not in MODES:
        raise ValueError(f"patch_all(fault_handling={mode!r}): expected one of {', '.join(map(repr, MODES))}")
    if _in_force and mode != _mode:
        raise ValueError(f"patch_all(fault_handling={mode!r}): Megatron already initialised with "
                         f"fault_handling={_mode!r}; choose the mode before Megatron initialises")
    _mode = mode


def put_in_force() -> None:
    global _in_force
    _in_force = True


def reset() -> None:
    global _mode, _in_force
    _mode, _in_force = ADAPTOR, False


def mode() -> str:
    return _mode


def client_handles_faults() -> bool:
    return _mode == CLIENT
