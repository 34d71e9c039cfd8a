"""Mixed precision in the recovery flows, on the real megatron.training (dp4, R=2, gloo): bf16, and fp16 with
Megatron's dynamic loss scale, as real jobs train (the other modules train in fp32). Per precision, the
uninterrupted run and one run under `mindio-adaptor launch` checked several ways: a UCE error on rank 1 in
step 3 repaired online from its replica peer (the fp32 main params and moments travel, and the loss scaler's
state with the step), then rank 2 killed in step 5 and replaced by a new process; it ends with the
uninterrupted run's losses and bit-identical final parameters."""
import re

import pytest

from fault_plan import fault_env
from mindio_adaptor.tiny.job import kept_one_process, process_ids, run_training

pytestmark = pytest.mark.e2e
HA = ["--enable-high-availability"]
PRECISIONS = {"bf16": ["--bf16"], "fp16": ["--fp16", "--initial-loss-scale", "65536"]}
ONLINE_THEN_KILLED = "raise:rank=1,step=3,msg=UCE ERROR injected;kill:rank=2,step=5"
LAUNCH = ("mindio_adaptor.launch", "--max-restarts", "1")


@pytest.fixture(scope="module", params=sorted(PRECISIONS))
def runs(request, tmp_path_factory):
    flags = [*HA, *PRECISIONS[request.param]]
    reference = run_training(flags).require_success()
    faulted = run_training([*flags, "--enable-hbmfault-repair", "--enable-worker-reboot"], launcher=LAUNCH,
                           env=fault_env(ONLINE_THEN_KILLED, tmp_path_factory.mktemp(request.param)))
    return request.param, reference, faulted


def test_the_precision_is_the_one_asked_for(runs):
    precision, reference, _ = runs
    assert re.search(rf"^  {precision} \.+ True$", reference.output, re.M), reference.output[:6000]
    if precision == "fp16":  # the dynamic scale shows in the log line
        assert re.search(r"loss scale: 65536\.0 \|", reference.output), reference.output[-3000:]


def test_online_repair_then_process_replacement_end_bit_identical(runs):
    _, reference, faulted = runs
    faulted.require_success()
    assert "decision retry: faults 1:memory repair_step=2" in faulted.output
    assert "online repair finished at step 2" in faulted.output
    assert "ranks [2] replaced, training resumes at step 4" in faulted.output
    seen = process_ids(faulted.output)
    for rank in (0, 1, 3):
        assert kept_one_process(seen, rank), seen
    assert len(set(seen[2]["starting"])) == 2, seen
    assert sorted(faulted.loss_line_steps) == list(range(1, 9))
    assert faulted.losses == reference.losses
    assert faulted.digest == reference.digest
