"""The reference's module name, re-exporting mindio_adaptor.ttp.exception_checkpoint (the same instance)."""
from mindio_adaptor.ttp.exception_checkpoint import (ExceptionHandler, ShardUnavailableError,  # noqa: F401
                                                     check_resumable_model, exception_checkpoint, load_partial,
                                                     partial_save_path, resume_iteration, save_partial)
