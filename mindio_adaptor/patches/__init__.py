"""The only place that knows Megatron's internals. One module per patched area; each exposes
`PATCHES`, a list of `registry.Patch`, applied by `mindio_adaptor.patch_all()`."""
from mindio_adaptor.core.process import compile_switch, cpu_torch, logs

# Modules of this package whose PATCHES are applied, in order; where several wrap one function, their nesting is
# patches/compositions' (not this order).
PATCH_MODULES = [
    "cpu_support",
    "dataset_helpers",
    "without_te",
    "arguments",
    "parallel_state",
    "training",
    "loss_lines",
    "uneven_batches",
    "optimizer_state",
    "fault_injection",
    "sections",
    "interrupted_save",
    "interrupted_evaluation",
    "exception_loop",
    "controller_link",
    "warm_spare",
    "job_end",
    "checkpoint_writer",
    "process_replacement",
    "train_reentry",
    "saved_step_reports",
    "signal_handler",
    "dataloader_signals",
]


def before_megatron_import():
    """What must be in place before megatron is first imported."""
    from mindio_adaptor.patches import library_compat

    logs.configure()
    compile_switch.install()
    library_compat.restore_for_installed_megatron()
    if not cpu_torch.accelerator_present():
        from mindio_adaptor.patches import cpu_support

        cpu_support.prepare_python_for_megatron()
        cpu_torch.install()


def after_unpatch():
    cpu_torch.uninstall()
    compile_switch.uninstall()
