"""A step's loss line as Megatron's training_log prints it, reduced and printed again from a rank's recorded
part (patches/loss_lines)."""
import torch
import torch.distributed as dist

from mindio_adaptor.megatron.args import args
from mindio_adaptor.megatron.call_arguments import has_parameter
from mindio_adaptor.megatron.timers import interval_reading


def is_last_rank() -> bool:
    """The rank that prints Megatron's loss lines (print_rank_last)."""
    return dist.get_rank() == dist.get_world_size() - 1


def prints_loss_line(step: int, is_first_iteration: bool = False) -> bool:
    """Whether Megatron's training_log prints a line for `step`."""
    return step % args().log_interval == 0 or bool(is_first_iteration)


def detached_losses(losses_reduced) -> list:
    """train_step's forward-backward output (one dict of loss tensors per micro-batch; before megatron-core
    0.16 a value may be a (loss, tokens) pair), kept aside."""
    def detached(value):
        if isinstance(value, (tuple, list)):
            return tuple(part.detach().clone() for part in value)
        return value.detach().clone()

    return [{key: detached(value) for key, value in micro_batch.items()} for micro_batch in losses_reduced or ()]


def gather_objects(obj) -> list:
    """Every rank's `obj`, in rank order (a collective of the whole job)."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, obj)
    return everyone


def reduce_step_losses(model, local: list) -> dict:
    """The reduction train_step makes of a step's losses for display, done again from this rank's part:
    token-weighted losses summed over the data-parallel group, per-micro-batch means kept local."""
    reduced = {}
    for key in local[0]:
        if isinstance(local[0][key], tuple):  # pairs the loss function reduced already (before 0.16)
            pairs = [micro_batch[key] for micro_batch in local]
            reduced[key] = float(sum(pair[0] for pair in pairs) / sum(pair[1] for pair in pairs))
            continue
        parts = [micro_batch[key].view(-1) for micro_batch in local]
        if parts[0].numel() == 2:
            total = torch.vstack(parts).sum(dim=0)
            dist.all_reduce(total, group=_loss_reduction_group(model))
            reduced[key] = float(total[0] / total[1])
        else:
            reduced[key] = float(torch.cat(parts).mean())
    return reduced


def _loss_reduction_group(model):
    from megatron.training import training

    if not hasattr(training, "ProcessGroupCollection"):  # megatron-core 0.12
        from megatron.core import parallel_state as ps

        return ps.get_data_parallel_group(with_context_parallel=True)
    pg_collection = (training.get_attr_wrapped_model(model[0], "pg_collection")
                     or training.ProcessGroupCollection.use_mpu_process_groups())
    return getattr(pg_collection, "dp_cp_gtp_remat", None) or pg_collection.dp_cp


def log_step_line(model, optimizer, step: int, reduced: dict, verdict) -> None:
    """Megatron's training_log of `step` from its recorded values (core/steps/loss_line's verdict), on every rank
    (it has collectives)."""
    from megatron.training import training

    def as_logged(stat):  # train_step's max over the model-parallel group: a float32's value
        return None if stat is None else torch.tensor([stat], dtype=torch.float32).item()

    values = dict(
        loss_dict={key: torch.tensor(value, dtype=torch.float) for key, value in reduced.items()},
        total_loss_dict={}, iteration=step, loss_scale=optimizer.get_loss_scale().item(), report_memory_flag=False,
        skipped_iter=int(verdict.skipped), grad_norm=as_logged(verdict.grad_norm),
        num_zeros_in_grad=as_logged(verdict.num_zeros),
        params_norm=training.calc_params_l2_norm(model) if args().log_params_norm else None,
        max_attention_logit=None, **_learning_rates(training, optimizer))
    if hasattr(training, "ProcessGroupCollection"):
        values["pg_collection"] = training.get_attr_wrapped_model(model[0], "pg_collection")
    # by name: the parameters moved between megatron-core versions, and 0.12 has a decoupled learning rate
    with interval_reading(verdict.interval_s):
        training.training_log(**{name: value for name, value in values.items()
                                 if has_parameter(training.training_log, name)})


def _learning_rates(training, optimizer) -> dict:
    if hasattr(training, "get_canonical_lr_for_logging"):
        return {"learning_rate": training.get_canonical_lr_for_logging(optimizer.param_groups)}
    rates = {"learning_rate": None, "decoupled_learning_rate": None}  # megatron-core 0.12's train loop
    for group in optimizer.param_groups:
        rates["decoupled_learning_rate" if group["is_decoupled_lr"] else "learning_rate"] = group["lr"]
    return rates
