"""The tiny jobs' workers are forked from a template that imported torch and Megatron once (launch/worker_template,
tiny/forked_torchrun): the same job under plain torchrun, every worker a new interpreter, trains exactly alike."""
import pytest

from mindio_adaptor.tiny.job import run_training

pytestmark = pytest.mark.e2e
PLAIN_TORCHRUN = ("torch.distributed.run",)


def test_workers_started_by_plain_torchrun_end_on_the_forked_workers_digest(reference_runs):
    forked, _ = reference_runs("plain")
    plain = run_training([], launcher=PLAIN_TORCHRUN).require_success()
    assert "workers are forked from a template process" in forked.output
    assert "workers are forked" not in plain.output
    assert plain.digest == forked.digest and plain.digest is not None
    assert plain.losses == forked.losses
