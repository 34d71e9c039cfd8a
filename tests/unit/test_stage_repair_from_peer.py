"""stages/repair_from_peer, in a real two-process gloo world: the source sends its shard and the repair
step's state; the receiver behind the repair step keeps the state for ROLLBACK; a shard of another
shape is refused, naming both."""
import torch

from recovery_fakes import FakeMegatron, action, marks, run_ranks, session_at, snapshot
from mindio_adaptor.core.detection.enums import RepairType
from mindio_adaptor.core.job.processor_link import RepairAssignment
from mindio_adaptor.recovery.stages.repair_from_peer import REPAIR_FROM_PEER, repair_from_peer


def repair(step):
    return action("repair", strategy="recover", step=step,
                  repair=RepairAssignment(RepairType.RECV_REPAIR, (0,), (1,), (0,), (0, 1)))


def repair_a_replacement(rank, shape):
    if rank == 0:  # the live replica peer, at step 5
        session = session_at(5)
        session.job.optimizer = [torch.arange(6.0).reshape(2, 3), torch.tensor(7.0)]
        session.job.scheduler = 5
    else:  # a replacement process: no step of its own, zeros where the shard goes
        session = session_at(None)
        session.replacement.active = True
        session.job.optimizer = [torch.zeros(shape), torch.tensor(0.0)]
    megatron = FakeMegatron(rank=rank, world_size=2)
    repair_from_peer(session, megatron, repair(5))
    return {"shard": [t.tolist() for t in session.job.optimizer], "calls": megatron.names(), "marks": marks(session),
            "received": None if session.received is None else (session.received["snapshot"],
                                                                session.received["scheduler"])}


def test_a_replacement_receives_the_shard_and_keeps_the_steps_state_for_rollback():
    results = run_ranks(2, repair_a_replacement, (2, 3))
    (s0, src), (s1, dst) = results[0], results[1]
    assert s0 == "ok" and s1 == "ok", results
    assert dst["shard"] == src["shard"] == [[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], 7.0]
    assert dst["calls"] == ["materialize_optimizer_state"]  # Adam's moments exist before they are received
    assert dst["received"] == (snapshot(5), {"num_steps": 5})
    assert src["received"] is None and src["calls"] == []
    assert [m for m in src["marks"]] == ["shard sent"] and dst["marks"] == ["shard received"]
    assert REPAIR_FROM_PEER.on_training_thread


def test_a_shard_of_another_shape_is_refused_naming_both():
    results = run_ranks(2, repair_a_replacement, (3, 2), timeout=90)
    status, text = results[1]
    assert status == "error"
    assert "RepairError: rank 0's optimizer shard does not match this rank's: 2 tensors [((2, 3), " \
           "'torch.float32'), ((), 'torch.float32')]... vs 2 tensors [((3, 2), 'torch.float32')" in text
