"""patches/signal_handler: Megatron's after-step question "did any rank get SIGTERM?" as one all_reduce over real
gloo processes: one rank's signal is every rank's answer, the same step, and the reduced tensor is reused. In the
training process the reduction starts with the step's optimizer step and the check waits for it: a signal that
comes during the update is answered at the next step, and a reduction started before a rebuild of the
communicators is left for one done at once."""
import subprocess
import sys
import textwrap

RANK = textwrap.dedent("""
    import sys
    import torch.distributed as dist
    from mindio_adaptor.patches import registry, signal_handler

    registry.patch_all(only=("cpu_support", "signal_handler"))
    from megatron.training.dist_signal_handler import DistributedSignalHandler

    rank, world, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    handler = DistributedSignalHandler()
    answers = []
    for signalled in ([], [1], [], [0, 2]):
        handler._signal_received = rank in signalled  # what Megatron's SIGTERM handler sets
        answers.append(handler.signals_received())
    print(rank, answers, len(signal_handler.CHECK.flags), flush=True)
    dist.destroy_process_group()
""")

STARTED = textwrap.dedent("""
    import sys
    import torch.distributed as dist
    from mindio_adaptor.patches import registry, signal_handler
    from mindio_adaptor.recovery.session import SESSION

    registry.patch_all(only=("cpu_support", "signal_handler"))
    from megatron.training.dist_signal_handler import DistributedSignalHandler

    rank, world, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    handler = DistributedSignalHandler().__enter__()  # Megatron enters it in the training process
    answers, paths, carried = [], [], False
    started_for_this_step = signal_handler.CHECK.started_for_this_step

    def spying():
        started = started_for_this_step()
        paths.append("started" if started else "at once")
        return started

    signal_handler.CHECK.started_for_this_step = spying
    # (step, ranks signalled before the optimizer step, during it, the communicators rebuilt during it)
    for step, before, during, rebuilt in ((1, [], [], False), (2, [1], [], False), (3, [], [2], False),
                                          (4, [], [], False), (5, [], [0], True)):
        handler._signal_received = rank in before or carried
        for hook in SESSION.job.before_optimizer_step:  # the optimizer step begins
            hook(step)
        handler._signal_received = handler._signal_received or rank in during
        SESSION.next_comm_epoch += int(rebuilt)
        SESSION.job.completed_steps.append(step)
        answers.append(handler.signals_received()[0])
        carried = rank in during
    print(rank, answers, paths, flush=True)
    handler.__exit__(None, None, None)
    dist.destroy_process_group()
""")


def run_ranks(script, tmp_path, world=3):
    ranks = [subprocess.Popen([sys.executable, "-c", script, str(rank), str(world), str(tmp_path / "store")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(world)]
    outputs = [proc.communicate(timeout=120) for proc in ranks]
    for proc, (_, err) in zip(ranks, outputs):
        assert proc.returncode == 0, err[-3000:]
    return [(out.strip(), err) for out, err in outputs]


def test_one_ranks_signal_is_every_ranks_answer(tmp_path):
    for rank, (out, err) in enumerate(run_ranks(RANK, tmp_path)):
        # any() of each answer is what Megatron's gather gave; one tensor serves every step
        assert out == f"{rank} [[False], [True], [False], [True]] 1", err[-2000:]


def test_the_reduction_started_with_the_update_answers_the_check(tmp_path):
    for rank, (out, err) in enumerate(run_ranks(STARTED, tmp_path)):
        # step 3's signal came during the update: answered at step 4. Step 5's reduction was started before a
        # rebuild: every rank reduces again at once, with the signal that came meanwhile.
        assert out == (f"{rank} [False, True, False, True, True] "
                       f"['started', 'started', 'started', 'started', 'at once']"), err[-2000:]
