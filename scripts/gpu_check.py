"""The project's check on a machine with one GPU (run by scripts/gpu_check.sh; docs/gpu_check.md holds what it
printed there).

One GPU cannot host a multi-rank NCCL job, so the check runs what one GPU can:
  1. the adaptor on a CUDA torch: `patch_all()` leaves the CPU device layer off, the native module loads;
  2. the real megatron.training on the GPU (NCCL, world 1, R=1) with a "UCE ERROR" raised in step 5: the
     controller reloads the periodic checkpoint online (LOAD_CKPT, NCCL communicators aborted and rebuilt,
     CUDA RNG restored) and the run must end with the uninterrupted run's losses and parameter digest;
  3. on the machine's CPU cores with the GPU hidden: dp8 R=2 gloo, a UCE ERROR on rank 5 repaired online from
     its replica peer, bit-identical to the uninterrupted dp8 run.
Each part prints PASS or FAIL with its numbers; the exit code is the number of parts that failed. Every run
has a time limit, so the whole check ends within CHECK_BUDGET_S.
"""
import os
import sys
import tempfile
import time
import traceback

from mindio_adaptor.tiny.job import run_training

CHECK_BUDGET_S = 300
GPU_FLAGS = ["--distributed-backend", "nccl", "--enable-high-availability", "--distributed-optimizer-no-replica",
             "--enable-hbmfault-repair", "--save-interval", "3"]
CRASH_TRACES = {"PYTHONFAULTHANDLER": "1"}  # a worker's segfault prints its Python stack
DP8_FLAGS = ["--enable-high-availability", "--enable-hbmfault-repair", "--global-batch-size", "32"]


def say(text):
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {text}", flush=True)


def keep(name, run):
    """Each run's whole output beside the check's log ($GPU_CHECK_LOGS), to read after the machine is gone."""
    folder = os.environ.get("GPU_CHECK_LOGS")
    if folder:
        with open(os.path.join(folder, f"{name}.log"), "w") as out:
            out.write(run.output)
    return run


def fault_env(spec, root):
    return {"MINDIO_FAULT_INJECT": spec, "MINDIO_FAULT_STATE_DIR": os.path.join(root, "faults")}


def adaptor_on_cuda():
    import torch

    import mindio_adaptor
    from mindio_adaptor.core.process import cpu_torch

    if not torch.cuda.is_available():
        raise AssertionError("torch sees no GPU")
    say(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}, "
        f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
    mindio_adaptor.patch_all()
    import mindio_adaptor._native  # noqa: F401  the controller and processor transport

    assert not cpu_torch.installed(), "the CPU device layer was installed on a machine with a GPU"
    return "CPU device layer off, native module loaded"


def compare(run, reference, what):
    run.require_success()
    reference.require_success()
    assert run.losses and run.losses == reference.losses, \
        f"{what}: losses differ: {run.losses} against {reference.losses}"
    assert run.digest and run.digest == reference.digest, \
        f"{what}: digest {run.digest} against {reference.digest}"


def gpu_reload_online(root):
    flags = [*GPU_FLAGS, "--save", os.path.join(root, "ref_ckpt")]
    started = time.monotonic()
    reference = keep("gpu_reference", run_training(flags, nproc=1, timeout=120, env=CRASH_TRACES))
    reference_s = time.monotonic() - started
    flags = [*GPU_FLAGS, "--save", os.path.join(root, "ckpt")]
    run = keep("gpu_reload", run_training(flags, nproc=1, timeout=120, env={
        **CRASH_TRACES, **fault_env("raise:rank=0,step=5,msg=UCE ERROR gpu", root)}))
    assert "online reload finished at step 3" in run.output, run.output[-4000:]
    compare(run, reference, "one GPU")
    return (f"reload of step 3 on the GPU, losses {len(run.losses)} equal, digest {run.digest[:16]} equal "
            f"(reference run {reference_s:.0f} s)")


def dp8_repair_on_cpu(root):
    cpu = {"CUDA_VISIBLE_DEVICES": "", **CRASH_TRACES}
    reference = keep("dp8_reference", run_training(DP8_FLAGS, nproc=8, timeout=150, env=cpu))
    run = keep("dp8_repair", run_training(DP8_FLAGS, nproc=8, timeout=150,
                                          env={**cpu, **fault_env("raise:rank=5,step=5,msg=UCE ERROR dp8", root)}))
    assert "online repair finished at step 4" in run.output, run.output[-4000:]
    compare(run, reference, "dp8")
    return f"rank 5 repaired at step 4, losses {len(run.losses)} equal, digest {run.digest[:16]} equal"


def main():
    started = time.monotonic()
    failed = 0
    with tempfile.TemporaryDirectory() as root:
        for name, part in (("adaptor on CUDA", adaptor_on_cuda),
                           ("megatron on one GPU, online reload", lambda: gpu_reload_online(root)),
                           ("dp8 gloo on the CPU cores, online repair", lambda: dp8_repair_on_cpu(root))):
            if time.monotonic() - started > CHECK_BUDGET_S:
                say(f"SKIP {name}: the check's {CHECK_BUDGET_S} s are spent")
                failed += 1
                continue
            try:
                say(f"PASS {name}: {part()}")
            except Exception as error:  # one part's failure must not hide the others
                failed += 1
                say(f"FAIL {name}: {type(error).__name__}: {str(error)[-1500:]}")
                traceback.print_exc()
    say(f"{3 - failed} of 3 parts passed in {time.monotonic() - started:.0f} s")
    return failed


if __name__ == "__main__":
    sys.exit(main())
