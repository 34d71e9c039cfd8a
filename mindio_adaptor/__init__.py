"""mindio_adaptor: fault tolerance for Megatron-LM training.

    import mindio_adaptor
    mindio_adaptor.patch_all()   # before Megatron initialises
"""
__version__ = "0.1.0"


def patch_all(fault_handling: str = "adaptor"):
    """Install every Megatron patch (idempotent). Safe before or after `import megatron`, but before
    Megatron initialises. `fault_handling="client"`: a framework adaptor written for the reference API
    (mindio_ttp) handles faults and answers the controller itself; the patches only give it the replica
    layout, the device layer and the stages its handlers call (recovery/client_actions,
    docs/reference_api.md)."""
    import os

    from mindio_adaptor.core.process import child_reaper, fork_safety, orphan_guard, process_ending
    from mindio_adaptor.patches import registry

    fork_safety.guard_forks()  # Megatron's DataLoader forks while torch's gloo threads enter Python
    orphan_guard.arm()  # in a helper process spawned by a rank: it must not outlive the rank
    orphan_guard.install_for_children()  # helpers forked or forkserver-started by this process end with it
    child_reaper.install()  # and its exit never waits without end for a daemonic child
    process_ending.bound_the_exit(lambda: f"rank {os.environ.get('RANK', '?')}")  # nor for a thread: 30 s at most
    registry.patch_all(fault_handling=fault_handling)


def unpatch_all():
    """Remove every patch installed by `patch_all()`, restoring Megatron's originals."""
    from mindio_adaptor.patches import registry

    registry.unpatch_all()


def training_model():
    """The model chunks Megatron built in this process (recorded by the patches), or None."""
    from mindio_adaptor.recovery.session import SESSION

    return SESSION.job.model


def replica_layout():
    """The job's `core.layout.replica_layout.ReplicaLayout` once Megatron's groups exist (high
    availability on), else None."""
    from mindio_adaptor.recovery.session import SESSION

    return SESSION.job.layout
