"""The reference's `mindio_ttp.adaptor`, which older MindSpeed-LLM releases import for their Megatron
training loop:

    tft_init_controller_processor(enable_tls=False, tls_option_top_path='')
    tft_register_processor(train_valid_test_dataset_provider, model_provider, model_type)
    iteration, num_floating_point_operations_so_far = tft_train(train_args, test_data_iterator_list)

Here the same calls run over mindio_adaptor's Megatron patches (mindio_adaptor.patch_all() before
Megatron initialises, and --enable-high-availability): the patches connect the controller and the
processor when Megatron initialises, register the recovery handlers, build the replica groups and
run Megatron's train() inside the exception loop. These calls check that this is so and go through
it. The reference adaptor's own Megatron patches (replica groups, replica optimizers) are what
mindio_adaptor's patches replace: their names exist and say so when called.
"""
import logging
from typing import Any, Callable, Optional

from mindio_ttp.adaptor import utils  # noqa: F401  (clients import the module)

logger = logging.getLogger(__name__)

_providers = {}  # what tft_register_processor was given, by name


class AdaptorNotReady(RuntimeError):
    """mindio_ttp.adaptor is used where mindio_adaptor's Megatron patches are not driving the job."""


def _require_patched_job() -> None:
    from mindio_adaptor.patches import exception_loop, registry

    if not registry._active:
        raise AdaptorNotReady("mindio_ttp.adaptor runs over mindio_adaptor's Megatron patches: call "
                              "mindio_adaptor.patch_all() before Megatron initialises")
    if not exception_loop.ha_enabled():
        raise AdaptorNotReady("mindio_ttp.adaptor needs Megatron's --enable-high-availability (its arguments are not "
                              "parsed yet, or the flag is off)")


def tft_init_controller_processor(enable_tls: bool = True, tls_option_top_path: str = "") -> None:
    """Start the controller (in rank 0, or the one MINDIO_CONTROLLER_ADDR names) and this rank's
    processor, unless the patches already did when Megatron initialised."""
    if enable_tls and tls_option_top_path:
        raise NotImplementedError("TLS is not implemented; authenticate with MINDIO_TOKEN on a trusted network and "
                                  "pass enable_tls=False")
    _require_patched_job()
    from mindio_adaptor.core.job import processor_link
    from mindio_adaptor.patches import controller_link

    if processor_link.current_or_none() is None:
        controller_link.connect()


def tft_register_processor(train_valid_test_dataset_provider: Callable, model_provider: Callable,
                           model_type: Any) -> None:
    """The reference registers its handlers here and keeps the providers to rebuild the model after a
    memory error. The patches registered the handlers when the processor started and rebuild from
    what Megatron's own setup recorded, so the providers are checked and kept (tft_providers()), once the
processor answers the recovery actions."""
    _require_patched_job()
    from mindio_adaptor.core.job import processor_link

    for name, provider in (("train_valid_test_dataset_provider", train_valid_test_dataset_provider),
                           ("model_provider", model_provider)):
        if not callable(provider):
            raise TypeError(f"tft_register_processor: {name} must be callable, got {provider!r}")
    link = processor_link.current_or_none()
    answered = link.answers if link is not None else ()
    missing = [h for h in ("stop", "clean", "repair", "rollback", "save_ckpt") if h not in answered]
    if missing:
        raise AdaptorNotReady(f"tft_register_processor: the processor has no {missing} handlers; call "
                              f"tft_init_controller_processor() first")
    _providers.update(dataset=train_valid_test_dataset_provider, model=model_provider, model_type=model_type)


def tft_providers() -> dict:
    """Ours: what tft_register_processor was given."""
    return dict(_providers)


def tft_train(train_args: list, test_data_iterator_list: list):
    """Megatron's train(*train_args), which the patches run inside the exception loop; returns what
    it returns (iteration, num_floating_point_operations_so_far)."""
    _require_patched_job()
    if not isinstance(train_args, list):
        raise TypeError(f"tft_train: train_args must be the list of train()'s arguments, got {type(train_args)}")
    from mindio_adaptor.megatron.train_loop import run_train

    return run_train(train_args)


def tft_is_arf_reboot_node() -> bool:
    """Whether this process replaces a dead rank (the reference's ARF)."""
    from mindio_adaptor.patches.process_replacement import is_replacement

    return is_replacement()


_losses_reduced: Optional[list] = None


def tft_set_losses_reduced(losses: Optional[list] = None) -> None:
    """The reference sends the last step's reduced losses to a repaired rank for its log line. Kept
    here (tft_losses_reduced()); the patches do not send them: a repaired rank's log has no loss for
    the interrupted step."""
    global _losses_reduced
    _losses_reduced = losses


def tft_losses_reduced() -> Optional[list]:
    return _losses_reduced


def ttp_get_replica_dp_num() -> int:
    """How many copies of each optimizer shard the data-parallel ranks hold (the reference divides the
    gradient norm, all-reduced over every copy, by it)."""
    from mindio_adaptor.recovery.session import SESSION

    layout = SESSION.job.layout
    if layout is None:
        raise AdaptorNotReady("ttp_get_replica_dp_num: no replica layout yet (Megatron's groups are built by "
                              "initialize_model_parallel, with --enable-high-availability)")
    return layout.sets[0].replica_cnt


def _patched_by_mindio_adaptor(name: str, what: str) -> Callable:
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"mindio_ttp.adaptor.{name}: {what} is done by mindio_adaptor's Megatron patches "
                                  f"(mindio_adaptor.patch_all()); the reference adaptor's own Megatron patches, which "
                                  f"call this, must not be applied together with them")

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


ttp_initialize_replica_dp_group = _patched_by_mindio_adaptor("ttp_initialize_replica_dp_group",
                                                             "building the replica groups")
ttp_get_dp_cp_replica_group = _patched_by_mindio_adaptor("ttp_get_dp_cp_replica_group", "the replica groups")
ttp_get_dp_cp_replica_group_gloo = _patched_by_mindio_adaptor("ttp_get_dp_cp_replica_group_gloo", "the replica groups")
ttp_get_dp_ep_replica_group = _patched_by_mindio_adaptor("ttp_get_dp_ep_replica_group", "the replica groups")
ttp_get_dp_ep_replica_group_gloo = _patched_by_mindio_adaptor("ttp_get_dp_ep_replica_group_gloo", "the replica groups")
tft_get_node_group = _patched_by_mindio_adaptor("tft_get_node_group", "grouping ranks by node")
TTPReplicaOptimizer = _patched_by_mindio_adaptor("TTPReplicaOptimizer", "the replicated distributed optimizer")
TTPFP16ReplicaOptimizer = _patched_by_mindio_adaptor("TTPFP16ReplicaOptimizer", "the replicated distributed optimizer")
TTPReplicaChainedOptimizer = _patched_by_mindio_adaptor("TTPReplicaChainedOptimizer",
                                                        "the replicated distributed optimizer")
