"""recovery/resize_from_replicas: a scale-out's and a scale-in's REPAIR without a checkpoint. Every rank builds
its objects again loaded from nothing, takes the step's common state from its data-parallel group's first
survivor, then its optimizer shard through core/layout/state_reshard (the exchange itself: test_state_reshard).
Here with a fake Megatron and the group's collectives replaced."""
import logging
from types import SimpleNamespace

import pytest

from recovery_fakes import FakeMegatron, FakeReplay, action, session_at, snapshot
from mindio_adaptor.core.layout import state_reshard
from mindio_adaptor.core.layout.scale_in_plan import plan_scale_in
from mindio_adaptor.core.layout.scale_out_plan import ScaleOutRefused, plan_scale_out
from mindio_adaptor.core.job.processor_link import SaveAssignment
from mindio_adaptor.recovery.stages import scale_in_save as scale_in_save_stage
from mindio_adaptor.recovery.stages.scale_in_state import scale_in_state
from mindio_adaptor.recovery.stages.scale_out_save import scale_out_save
from mindio_adaptor.recovery.stages.scale_out_state import scale_out_state

SCALED_IN = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2)
PLAN = plan_scale_out(SCALED_IN, [2, 3], global_batch_size=16, micro_batch_size=2)


class FakeScheduler:
    def __init__(self, steps):
        self.steps = steps

    def state_dict(self):
        return {"num_steps": self.steps}

    def load_state_dict(self, state):
        self.steps = state["num_steps"]


@pytest.fixture
def group(monkeypatch):
    """The data-parallel group: ranks 0 (a survivor, whose report the test sets) and 2 (returned)."""
    seen = SimpleNamespace(resharded=[], groups=[], survivor=None)

    def gather(group_, item):
        assert group_ == "data-parallel group"
        return [seen.survivor or item, (2, None)]

    def reshard(group_, held, wanted):
        seen.resharded.append((held, wanted))
        seen.groups.append(group_)
        return 3, 4096

    monkeypatch.setattr(state_reshard, "gather", gather)
    monkeypatch.setattr(state_reshard, "reshard_in_group", reshard)
    return seen


def survivor_session():
    session = session_at(6)
    session.latest = snapshot(6, samples=96)
    session.job.optimizer, session.job.scheduler = "old optimizer", FakeScheduler(6)
    session.scale_out = PLAN
    return session


def test_a_survivor_sends_its_state_and_reshards_its_own_shard_without_a_checkpoint(group, caplog):
    session, megatron = survivor_session(), FakeMegatron(global_batch_size=16, world_size=4)
    session.replay.iterators[1] = replay = FakeReplay()
    with caplog.at_level(logging.INFO):
        assert scale_out_state(session, megatron, action("repair", strategy="scale_out", step=6)) == 0
    assert megatron.called("rebuild") == [(None, None)]  # built again, loaded from nothing
    # It held its old optimizer's slots before the rebuild; the shard it wants is the new optimizer's.
    [(held, _)] = group.resharded
    assert held == {"slots of": "old optimizer"}  # the fake rebuild keeps the objects: wanted is alike here
    assert megatron.called("install_optimizer_common_state") == [({"common state of": "old optimizer"},)]
    assert megatron.called("set_iteration_state") == [(6,)]
    assert (session.latest.iteration, session.latest.consumed_train_samples) == (6, 96)
    assert replay.restarts == [(96, 6)] and megatron.called("load_checkpoint_of_step") == []
    [said] = [r.getMessage() for r in caplog.records if "elastic training: scaled out" in r.getMessage()]
    assert "training goes on from sample 96" in said and "(state from the replicas in " in said
    assert any("resharded from the replicas in memory at rank 0 (3 pieces, 4096 bytes received)" in r.getMessage()
               for r in caplog.records)


def test_a_returned_process_takes_the_first_survivors_state_and_holds_nothing(group):
    group.survivor = (0, {"snapshot": snapshot(6, samples=96), "consumed_valid_samples": 64,
                          "optimizer": {"param_groups": "of rank 0"}, "scheduler": {"num_steps": 6}})
    session, megatron = session_at(None), FakeMegatron(rank=2, world_size=4)
    session.job.scheduler = scheduler = FakeScheduler(0)
    session.replacement.active = True
    session.replacement.train_data_iterator = holder = SimpleNamespace(iterable=iter(range(100)))
    scale_out_state(session, megatron, action("repair", strategy="scale_out", step=6))
    [(held, _)] = group.resharded
    assert held == {}
    assert megatron.called("install_optimizer_common_state") == [({"param_groups": "of rank 0"},)]
    assert scheduler.steps == 6 and session.latest.consumed_train_samples == 96
    assert next(holder.iterable) == 96 and session.replacement.joined_at == 6 and not session.is_behind(6)
    # the survivor's validation position, and the validation iterator started again there (as on every rank of a
    # resize: the data-parallel size changed)
    assert megatron.called("set_valid_position") == [(64,)]
    assert [call[1:] for call in megatron.called("position_valid_iterators")] == [(64, "scale-out at step 6")]
    assert megatron.called("position_test_iterators") == [(session.job.test_data_iterators, "scale-out at step 6")]


def test_a_group_without_a_survivor_is_refused_naming_it(monkeypatch, group):
    monkeypatch.setattr(state_reshard, "gather", lambda group_, item: [(1, None), (3, None)])
    session, megatron = session_at(None), FakeMegatron(rank=1, world_size=4)
    session.replacement.active = True
    with pytest.raises(ScaleOutRefused, match=r"no survivor of the scale-in in data-parallel group \[1, 3\]: "
                                              r"nothing holds step 6's state"):
        scale_out_state(session, megatron, action("repair", strategy="scale_out", step=6))


def test_from_the_replicas_the_survivors_save_no_checkpoint(caplog):
    session, megatron = survivor_session(), FakeMegatron(world_size=2)
    session.scale_in = SCALED_IN
    with caplog.at_level(logging.INFO):
        assert scale_out_save(session, megatron, action("save_ckpt", strategy="scale_out", step=6)) == 0
    assert megatron.calls == []
    assert any("no checkpoint of step 6 saved" in r.getMessage() for r in caplog.records)


def scaled_in_survivor(rank):
    session = session_at(4)
    session.latest = snapshot(4, samples=64)
    session.job.optimizer, session.job.scheduler = "old optimizer", FakeScheduler(4)
    session.scale_in = SCALED_IN
    return session, FakeMegatron(global_batch_size=16, rank=rank, world_size=2)


def test_a_scale_in_survivor_reshards_what_the_survivors_hold_without_the_dump(group, caplog):
    """--elastic-scale-in-from replicas (the default): built at dp2 from nothing, no checkpoint loaded."""
    session, megatron = scaled_in_survivor(rank=0)
    session.save_root = None  # no --save needed
    session.replay.iterators[1] = replay = FakeReplay()
    with caplog.at_level(logging.INFO):
        assert scale_in_state(session, megatron, action("repair", strategy="scale_in", step=4)) == 0
    assert megatron.called("rebuild") == [(None, None)] and megatron.called("load_checkpoint_of_step") == []
    [(held, _)] = group.resharded
    assert held == {"slots of": "old optimizer"}
    assert megatron.called("set_iteration_state") == [(4,)] and replay.restarts == [(64, 4)]
    [said] = [r.getMessage() for r in caplog.records if "elastic training: scaled in" in r.getMessage()]
    assert said.startswith("elastic training: scaled in dp4 -> dp2") and "(state from the replicas in " in said
    assert any("scale-in: step 4's optimizer state resharded from the replicas in memory at rank 0" in r.getMessage()
               for r in caplog.records)


def test_a_scale_in_from_the_replicas_writes_no_dump_and_from_a_checkpoint_writes_it(monkeypatch, caplog):
    written = []
    monkeypatch.setattr(scale_in_save_stage, "save_dump", lambda session, megatron, action: written.append("saved") or 0)
    monkeypatch.setattr(scale_in_save_stage, "publish_dump",
                        lambda session, megatron, action: written.append("published") or 0)
    saves = (SaveAssignment(0, (0, 1)),)
    session, megatron = scaled_in_survivor(rank=0)
    with caplog.at_level(logging.INFO):
        assert scale_in_save_stage.scale_in_save(session, megatron, action("save_ckpt", step=4, saves=saves)) == 0
        assert scale_in_save_stage.scale_in_publish(session, megatron, action("rename", step=4)) == 0
    assert written == [] and megatron.calls == []
    assert [r.getMessage() for r in caplog.records] == [
        "scale-in: no dump of step 4 written: the survivors reshard the state among themselves in memory"]
    session.config.elastic_scale_in_from = "checkpoint"
    scale_in_save_stage.scale_in_save(session, megatron, action("save_ckpt", step=4, saves=saves))
    scale_in_save_stage.scale_in_publish(session, megatron, action("rename", step=4))
    assert written == ["saved", "published"]


def test_the_experts_state_is_resharded_within_the_expert_data_parallel_group(group):
    """Expert parallelism: the dense state over the data-parallel group, then the experts' over theirs."""
    session, megatron = scaled_in_survivor(rank=0)
    megatron.expert_slots = {"1.0.decoder.layers.0.mlp.experts.weight1": "expert slot"}
    scale_in_state(session, megatron, action("repair", strategy="scale_in", step=4))
    assert group.groups == ["dense data-parallel group", "expert data-parallel group"]
    assert [held for held, _ in group.resharded] == [{"slots of": "old optimizer"},
                                                     {"1.0.decoder.layers.0.mlp.experts.weight1": "expert slot"}]
