"""Which periodic checkpoints an online reload (recovery/stages/reload_checkpoint, the reference's
LOAD_CKPT) may load: every rank tells the controller each periodic checkpoint it has finished writing.

The checkpoint step is reported when Megatron's save returns on the rank (its writes are complete);
asynchronous saves (--async-save) complete later and are not reported, so they are never reloaded.
A client of the reference API that handles faults reports its checkpoints itself
(tft_report_saved_ckpt_step).
"""
from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.job import processor_link
from mindio_adaptor.patches.exception_loop import adaptor_handles_faults
from mindio_adaptor.patches.patch import Patch


def _report_saved_step(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    iteration = args[0] if args else kwargs["iteration"]
    if adaptor_handles_faults() and not megatron_job.args().async_save:
        processor_link.current().report_saved_step(int(iteration))
    return result


PATCHES = [
    Patch("megatron.training.training", "save_checkpoint_and_time", _report_saved_step),
]
