"""patches/signal_handler: Megatron's after-step question "did any rank get SIGTERM?" as one all_reduce over real
gloo processes: one rank's signal is every rank's answer, the same step, and the reduced tensor is reused."""
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
    print(rank, answers, len(signal_handler._FLAGS), flush=True)
    dist.destroy_process_group()
""")


def test_one_ranks_signal_is_every_ranks_answer(tmp_path):
    world = 3
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, str(rank), str(world), str(tmp_path / "store")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(world)]
    outputs = [proc.communicate(timeout=120) for proc in ranks]
    for rank, (proc, (out, err)) in enumerate(zip(ranks, outputs)):
        assert proc.returncode == 0, err[-3000:]
        # any() of each answer is what Megatron's gather gave; one tensor serves every step
        assert out.strip() == f"{rank} [[False], [True], [False], [True]] 1", err[-2000:]
