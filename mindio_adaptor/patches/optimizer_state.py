"""Checkpoint-load fixes for Megatron's DistributedOptimizer over plain torch Adam (no Apex/TE).

megatron-core 0.19 has three defects there, hit by every CPU run (see shared notes):
1. `state_dict()` asserts one Adam step even before Adam has any state (the load template).
2. `load_state_dict()` hands ONE step tensor to every parameter, so torch Adam, which increments the
   step in place per parameter, advances it once per parameter each iteration after a resume; and
   the dp_reshardable load then overwrites it with the template's dummy step.
3. `load_parameter_state_from_dp_reshardable` (torch_dist) and `load_parameter_state_from_dp_zero`
   (--ckpt-format torch) copy into fp32 leaf views outside `no_grad`.
4. the torch-format parameter state holds no per-parameter "step", which torch Adam keeps per
   parameter: `_set_main_param_and_optimizer_states` then fails on the missing key. The step comes
   from the optimizer's own state dict (2.), so the parameter state may leave it as it is.
Each parameter gets its own copy of the saved step, restored after the parameter-state load.

megatron-core 0.15 also puts torch Adam's per-parameter step (a 0-dim tensor) among the tensors of its
dp_reshardable parameter state, whose save then fails a shape check (every torch_dist save without Apex or TE);
0.16 leaves the step out (it is saved with the param groups), and so does the patch here.
"""
import torch

from mindio_adaptor.patches.patch import Patch

DOPT = "DistributedOptimizer"


def _plain_torch_adam():
    from megatron.core.optimizer import distrib_optimizer

    return not distrib_optimizer.HAVE_APEX_OR_TE


def _state_dict(wrapped, instance, args, kwargs):
    if not instance.optimizer.state:
        _init_with_dummy_values(instance)
    return wrapped(*args, **kwargs)


def _init_with_dummy_values(instance):
    """Adam's state allocated by one step on zero gradients, which the checkpoint load then overwrites, as
    Megatron's own helper for this does from 0.13 on (0.12 has none)."""
    if hasattr(instance, "_init_optimizer_states_with_dummy_values"):
        return instance._init_optimizer_states_with_dummy_values()
    for group in instance.optimizer.param_groups:
        for param in group["params"]:
            if param.numel() > 0:
                param.grad = torch.zeros_like(param)
    instance.optimizer.step()
    instance.optimizer.zero_grad()


def _load_state_dict(wrapped, instance, args, kwargs):
    state_dict = args[0] if args else kwargs["state_dict"]
    steps = {g["step"] for g in state_dict["optimizer"]["param_groups"] if g.get("step") is not None}
    if len(steps) != 1:
        raise RuntimeError(f"optimizer checkpoint holds {len(steps)} different Adam steps {sorted(steps)}; "
                           f"expected exactly one")
    saved_step = float(steps.pop())
    instance._mindio_loaded_step = saved_step
    result = wrapped(*args, **kwargs)
    _give_each_param_its_step(instance.optimizer, saved_step)
    return result


def _load_parameter_state(wrapped, instance, args, kwargs):
    with torch.no_grad():
        result = wrapped(*args, **kwargs)
    saved_step = getattr(instance, "_mindio_loaded_step", None)
    if saved_step is not None:
        _give_each_param_its_step(instance.optimizer, saved_step)
    return result


def _keep_step_when_missing(wrapped, instance, args, kwargs):
    model_param, tensors = args
    group_index, group_order = instance.model_param_group_index_map[model_param]
    main_param = instance.optimizer.param_groups[group_index]["params"][group_order]
    step = instance.optimizer.state.get(main_param, {}).get("step")
    if isinstance(step, torch.Tensor) and "step" not in tensors:
        tensors = {**tensors, "step": step.clone()}
    return wrapped(model_param, tensors, **kwargs)


def _without_scalar_steps(wrapped, instance, args, kwargs):
    state = wrapped(*args, **kwargs)
    for buffer_state in (value for key, value in state.items() if isinstance(key, int)):  # per gradient buffer
        for buckets in buffer_state.values():  # per dtype
            for bucket in buckets:
                for tensors in bucket:
                    step = tensors.get("step")
                    if isinstance(step, torch.Tensor) and step.dim() == 0:
                        del tensors["step"]
    return state


def _give_each_param_its_step(optimizer, step: float):
    for state in optimizer.state.values():
        if "step" in state:
            state["step"] = torch.tensor(step, dtype=torch.float32)


PATCHES = [
    Patch("megatron.core.optimizer.distrib_optimizer", f"{DOPT}.state_dict", _state_dict, _plain_torch_adam),
    Patch("megatron.core.optimizer.distrib_optimizer", f"{DOPT}.load_state_dict", _load_state_dict,
          _plain_torch_adam),
    Patch("megatron.core.optimizer.distrib_optimizer", f"{DOPT}.load_parameter_state_from_dp_reshardable",
          _load_parameter_state, _plain_torch_adam, first="0.15"),  # the dp_reshardable format came in 0.15
    Patch("megatron.core.optimizer.distrib_optimizer", f"{DOPT}.get_parameter_state_dp_reshardable",
          _without_scalar_steps, _plain_torch_adam, first="0.15", last="0.15"),
    Patch("megatron.core.optimizer.distrib_optimizer", f"{DOPT}.load_parameter_state_from_dp_zero",
          _load_parameter_state, _plain_torch_adam),
    Patch("megatron.core.optimizer.distrib_optimizer", f"{DOPT}._set_main_param_and_optimizer_states",
          _keep_step_when_missing, _plain_torch_adam),
]
