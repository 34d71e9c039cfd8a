"""What the recovery-stage tests share: an in-memory session, a stand-in for the Megatron facade
(mindio_adaptor/megatron) that records what a stage asked of Megatron, and real gloo worlds of a few
processes for the stages that move data between ranks."""
import multiprocessing as mp
import os
import queue
import traceback
from datetime import timedelta
from types import SimpleNamespace

import torch.distributed as dist

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.communication.comm import host_store
from mindio_adaptor.core.steps.step_snapshot import StepSnapshot
from mindio_adaptor.recovery.session import RecoverySession
from mindio_adaptor.recovery.stages.stage import RecoveryAction


def snapshot(step: int, samples: int = None) -> StepSnapshot:
    return StepSnapshot(step, samples if samples is not None else 8 * step, 0, 100.0 * step, {"rng of step": step})


def session_at(step=None, **fields) -> RecoverySession:
    """A session in a recovery, whose last completed step is `step` (None: it completed none)."""
    session = RecoverySession(**fields)
    session.latest = None if step is None else snapshot(step)
    session.timeline.begin(step or 0, "a fault of the test")
    return session


def marks(session) -> list:
    """The timeline events the stages marked in the current recovery (after its "detected")."""
    return [event for event, _, _ in session.timeline.current.marks][1:]


def action(name: str, **fields) -> RecoveryAction:
    return RecoveryAction(name, **fields)


class FakeMegatron:
    """Megatron as the stages see it: arguments, and a record of every call that changes its state."""

    def __init__(self, **args):
        self.margs = SimpleNamespace(**{**dict(rank=0, world_size=1, distributed_timeout_minutes=1, curr_iteration=0,
                                               iteration=0, consumed_train_samples=0, skipped_train_samples=0,
                                               consumed_valid_samples=0,
                                               num_floating_point_operations_so_far=0.0, save=None,
                                               async_save=False, dataloader_type="single",
                                               expert_model_parallel_size=1), **args})
        self.calls = []
        self.groups = {}
        self.loaded = None  # (iteration, flops) load_checkpoint_of_step returns
        self.expert_slots = {}  # optimizer_state_slots' "expert" kind (expert parallelism)
        self.rebuilt = (0, 0.0)  # (iteration, flops) rebuild returns

    def _record(self, name, *args):
        self.calls.append((name, *args))

    def called(self, name):
        return [c[1:] for c in self.calls if c[0] == name]

    def names(self):
        return [c[0] for c in self.calls]

    def args(self):
        return self.margs

    def current_iteration(self):
        return self.margs.curr_iteration + 1

    def set_iteration_state(self, snap):
        self._record("set_iteration_state", snap.iteration)
        self.margs.iteration, self.margs.consumed_train_samples = snap.iteration, snap.consumed_train_samples
        self.margs.skipped_train_samples = snap.skipped_train_samples
        self.margs.num_floating_point_operations_so_far = snap.floating_point_operations

    def set_data_position(self, snap):
        self._record("set_data_position", snap.iteration)

    def rng_states(self):
        return {"rng now": True}

    def restore_rng(self, states):
        self._record("restore_rng", states)

    def set_running_timers(self, names=frozenset()):
        self._record("set_running_timers", set(names))

    def running_timers(self):
        return {"interval-time"}

    def reset_rerun_state(self):
        self._record("reset_rerun_state")

    def process_groups(self):
        return dict(self.groups)

    def reinitialize_parallel_state(self, init_call, replica_layout=True):
        self._record("reinitialize_parallel_state", init_call, replica_layout)
        self.groups = {name: dist.new_group(list(range(dist.get_world_size()))) for name in self.groups}

    def drop_gradients(self, model):
        self._record("drop_gradients", model)

    def rederive_model_params(self, model, optimizer):
        self._record("rederive_model_params")

    def shard_tensors(self, optimizer):
        return optimizer  # the tests' optimizer is its list of shard tensors

    def materialize_optimizer_state(self, optimizer):
        self._record("materialize_optimizer_state")

    def step_state(self, scheduler, optimizer):
        return {"scheduler": {"num_steps": scheduler}, "lazy_caches": [{}]}

    def install_step_state(self, state, scheduler, optimizer):
        self._record("install_step_state", state["scheduler"])

    def iterator_at_sample(self, old, who):
        self._record("iterator_at_sample", self.margs.consumed_train_samples, who)
        return iter(range(self.margs.consumed_train_samples, self.margs.consumed_train_samples + 100))

    def position_train_iterators(self, holder, who):
        megatron_job.position_train_iterators(holder, who, reposition=self.iterator_at_sample, margs=self.margs)

    def valid_position(self):
        return self.margs.consumed_valid_samples

    def set_valid_position(self, consumed):
        self._record("set_valid_position", consumed)
        self.margs.consumed_valid_samples = consumed

    def position_valid_iterators(self, holder, who):
        self._record("position_valid_iterators", holder, self.margs.consumed_valid_samples, who)

    def position_test_iterators(self, holders, who):
        self._record("position_test_iterators", holders, who)

    def rebuild(self, job, root, step):
        """The model and optimizer built again (from the checkpoint of `step` under `root`, or from nothing):
        returns `rebuilt` as (iteration, FLOPs)."""
        self._record("rebuild", root, step)
        return self.rebuilt

    def apply_scale_in_sizes(self, plan, old_rank, init_call):
        self._record("apply_scale_in_sizes", plan.new_dp, old_rank)
        self.margs.rank, self.margs.world_size = plan.new_rank(old_rank), len(plan.survivors)
        return init_call

    def take_original_rank(self, plan):
        current = self.margs.rank
        self.margs.rank, self.margs.world_size = plan.original_rank(current), plan.world_size
        return current

    def apply_original_sizes(self, plan, init_call):
        self._record("apply_original_sizes", plan.new_dp)
        return init_call

    def weigh_loss(self, margs, optimizer):
        self._record("weigh_loss")

    def optimizer_state_slots(self, model, optimizer):
        return {"dense": {"slots of": optimizer}, "expert": dict(self.expert_slots)}

    def state_group(self, kind):
        return f"{kind} data-parallel group"

    def data_parallel_group(self):
        return "data-parallel group"

    def optimizer_common_state(self, optimizer):
        return {"common state of": optimizer}

    def install_optimizer_common_state(self, optimizer, state):
        self._record("install_optimizer_common_state", state)

    def save_checkpoint_for_full_job(self, step, model, optimizer, scheduler, flops, save_dir, members, world_size):
        """Writes what Megatron's save would, a file per rank in the step's directory under save_dir."""
        from pathlib import Path

        from mindio_adaptor.core.checkpoint.dump_dir import iteration_dir_name

        self._record("save_checkpoint_for_full_job", step, flops, list(members), world_size)
        directory = Path(save_dir) / iteration_dir_name(step)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"rank{self.margs.rank}.pt").write_text(f"step {step}")

    def load_checkpoint_of_step(self, model, optimizer, scheduler, step):
        self._record("load_checkpoint_of_step", step)
        return self.loaded


class FakeCommunicators:
    """recovery/comm_rebuild as the stages reach it (session.communicators): a record of each call, every rebuild
    a success numbered `epoch`, or raising `failure` (the real rebuilds are walked in test_stage_rebuild_groups
    and end to end)."""

    def __init__(self, epoch: int = 7, failure: BaseException = None):
        self.epoch, self.failure, self.calls = epoch, failure, []

    def continue_epochs_of_the_job(self, session):
        self.calls.append("epochs from the store")

    def catch_up_with_the_job(self, session):
        self.calls.append("caught up with the job")

    def rebuild_world(self, session, margs, members):
        self.calls.append((margs.rank, margs.world_size, list(members)))
        if self.failure is not None:
            raise self.failure
        return self.epoch


class FakeReplay:
    """A data iterator's replay wrapper: where it was asked to go."""

    def __init__(self, replayed: int = 0):
        self.replayed, self.positions, self.restarts = replayed, [], []
        self.inner = iter(())

    def position_after(self, step):
        self.positions.append(step)
        return self.replayed

    def restart(self, inner, step):
        self.restarts.append((next(inner), step))


def _rank_main(rank, world, port, target, args, results):
    # MINDIO_TOKEN: the job's facts are sealed with it (core/job/job_store), as every worker of a launcher has it
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      MINDIO_TOKEN="recovery-fakes-token")
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))
        dist.init_process_group("gloo", store=dist.PrefixStore("first world", store), rank=rank,
                                world_size=world, timeout=timedelta(seconds=30))
        results.put((rank, "ok", target(rank, *args)))
    except BaseException as exc:  # handed to the test, which names the rank
        results.put((rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def run_ranks(world: int, target, *args, timeout: float = 60.0) -> dict:
    """target(rank, *args) in `world` fresh processes joined in a gloo world (the job's store hosted
    here, as a launcher hosts it); rank -> ("ok", result) or ("error", text). target must be a
    module-level function (the processes are spawned)."""
    store = host_store(0, "127.0.0.1", timeout=timedelta(seconds=30))
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, world, store.port, target, args, results)) for r in range(world)]
    for p in procs:
        p.start()
    out = {}
    try:
        while len(out) < world:
            rank, status, value = results.get(timeout=timeout)
            out[rank] = (status, value)
    except queue.Empty:
        raise AssertionError(f"ranks {sorted(set(range(world)) - set(out))} gave no result within {timeout} s")
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    return out
