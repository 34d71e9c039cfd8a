"""Megatron's model, DDP wrapper, optimizer and scheduler built again with its own setup, at the sizes the
arguments hold now (a resize), and put in the places Megatron's frames hold."""
import contextlib

from mindio_adaptor.core.layout.scale_in_plan import ScaleInRefused
from mindio_adaptor.megatron.args import args

# Set on the model config by train() (and read by Megatron's schedules from the model's own config).
TRAIN_LOOP_CONFIG_FIELDS = ("grad_scale_func", "timers", "no_sync_func", "grad_sync_func", "param_sync_func",
                            "finalize_model_grads_func")


def setup_model_and_optimizer_again(setup_call, old_model, root, step) -> tuple:
    """Megatron's setup_model_and_optimizer called again as the job called it (`setup_call`, recorded at
    start), with the process groups as they are now, loaded from the checkpoint of `step` under `root` (None:
    from nothing); what train() set on the old model's config is set on the new one. Returns (model,
    optimizer, scheduler)."""
    from megatron.core.utils import get_model_config
    from megatron.training import training

    call_args, call_kwargs = with_current_groups(*setup_call, args().num_distributed_optimizer_instances)
    with _loading_from(root, step):
        model, optimizer, scheduler = training.setup_model_and_optimizer(*call_args, **call_kwargs)
    old_config, new_config = get_model_config(old_model[0]), get_model_config(model[0])
    for name in TRAIN_LOOP_CONFIG_FIELDS:
        setattr(new_config, name, getattr(old_config, name, None))
    if old_config is not new_config and type(old_config) is type(new_config):
        # pretrain() hands its config object to train() (0.12 to 0.18 set the loop's fields on that one, and
        # a returned process enters train() only after this rebuild): both objects share one state.
        old_config.__dict__ = new_config.__dict__
    return model, optimizer, scheduler


# Megatron caches checkpoint strategies (which hold the data-parallel group) in the checkpointing context.
CACHED_CHECKPOINT_STRATEGIES = ("save_strategy", "load_strategy")


def with_current_groups(call_args, call_kwargs, replicas: int) -> tuple:
    """The recorded setup call with Megatron's process groups as they are now: pretrain() passes the
    groups of the start as a ProcessGroupCollection, and its checkpointing context may hold strategies
    built on them (the context is the one pretrain() keeps: it is cleared, not replaced). Its DDP
    config takes the current optimizer instance count (`replicas`, core/layout/scale_in_plan)."""
    call_kwargs = dict(call_kwargs)
    if "pg_collection" in call_kwargs:
        from megatron.core.process_groups_config import ProcessGroupCollection

        call_kwargs["pg_collection"] = ProcessGroupCollection.use_mpu_process_groups()
    ddp_config = getattr(call_kwargs.get("cfg_container"), "ddp", None)
    if ddp_config is not None:  # built from the arguments at start: the replica count may have fallen since
        ddp_config.num_distributed_optimizer_instances = replicas
    context = call_kwargs.get("checkpointing_context")
    for key in CACHED_CHECKPOINT_STRATEGIES:
        if isinstance(context, dict):
            context.pop(key, None)
    return call_args, call_kwargs


@contextlib.contextmanager
def _loading_from(root, step):
    """Megatron's arguments while a model is built again (setup_model_and_optimizer) from the checkpoint of
    `step` under `root` (None: from nothing), as a full load of it: the optimizer and RNG too, not a finetune.
    The consumed sample counts are zero meanwhile (megatron-core 0.12's load asserts that no sample was
    consumed yet, and sets them from the checkpoint); where the load set none, they come back as they were."""
    margs = args()
    names = ("load", "ckpt_step", "finetune", "no_load_optim", "no_load_rng", "pretrained_checkpoint")
    counts = ("consumed_train_samples", "skipped_train_samples", "consumed_valid_samples")
    pinned = {name: getattr(margs, name, None) for name in names}
    consumed = {name: getattr(margs, name) for name in counts}
    for name, value in zip(names, (root, step, False, False, False, None)):
        setattr(margs, name, value)
    for name in counts:
        setattr(margs, name, 0)
    try:
        yield margs
    finally:
        for name, value in pinned.items():
            setattr(margs, name, value)
        if all(getattr(margs, name) == 0 for name in counts):
            for name, value in consumed.items():
                setattr(margs, name, value)


def rebuild(job, root, step) -> tuple:
    """Model, DDP wrapper, optimizer and scheduler built again at the current sizes, loaded from the
    checkpoint of `step` under `root` (with no `root`: loaded from nothing, freshly initialised, for a state
    that comes from elsewhere); they take the places of the job's old ones. Returns (iteration, FLOPs so
    far) as loaded (0, 0 without a checkpoint)."""
    if job.setup_call is None:
        raise ScaleInRefused("the job's setup_model_and_optimizer call was not recorded: nothing to build the "
                             "model again with")
    old_model, old_optimizer, old_scheduler = job.model, job.optimizer, job.scheduler
    model, optimizer, scheduler = setup_model_and_optimizer_again(job.setup_call, old_model, root, step)
    old_model[:] = model
    take_place_of(old_optimizer, optimizer)
    take_place_of(old_scheduler, scheduler)
    job.model, job.optimizer, job.scheduler = old_model, old_optimizer, old_scheduler
    margs = args()
    return margs.iteration, margs.num_floating_point_operations_so_far


def take_place_of(old, new) -> None:
    """`old` (held by Megatron's pretrain and train frames) becomes `new`: the same class, sharing its
    attributes, so either reference acts on the new state."""
    if old is None:
        return
    if type(old) is not type(new):
        raise ScaleInRefused(f"the rebuilt {type(new).__name__} cannot take the place of the job's "
                             f"{type(old).__name__}")
    old.__dict__ = new.__dict__
