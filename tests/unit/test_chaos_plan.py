"""The chaos soak's fault plans (bench/chaos.py): a seed gives one plan, node 0 is spared unless allowed, a
fixed sequence is read as written or refused with the grammar named, every kind can be drawn, and the faults a
rank injects itself become its MINDIO_FAULT_INJECT."""
import pytest

from mindio_adaptor.tiny.job import bench_script


@pytest.fixture(scope="module")
def chaos():
    return bench_script("chaos")


def test_a_seed_gives_one_plan_of_increasing_steps_inside_the_run(chaos):
    names = [[f.name() for f in chaos.random_plan(seed, chaos.KINDS, True, 6, 300)] for seed in (7, 7, 8)]
    assert names[0] == names[1] != names[2]
    steps = [f.after_step for f in chaos.random_plan(7, chaos.KINDS, True, 6, 300)]
    assert steps == sorted(set(steps)) and 1 <= steps[0] and steps[-1] < 300


def test_node_0_is_lost_only_when_allowed(chaos):
    spared = [f for seed in range(20) for f in chaos.random_plan(seed, ["node"], False, 5, 300)]
    allowed = [f for seed in range(20) for f in chaos.random_plan(seed, ["node"], True, 5, 300)]
    assert {f.target for f in spared} == {1}
    assert {f.target for f in allowed} == {0, 1}


def test_stalls_last_3_to_8_s_and_only_the_kinds_asked_for_are_drawn(chaos):
    faults = [f for seed in range(10) for f in chaos.random_plan(seed, ["stall"], False, 6, 300)]
    assert {f.kind for f in faults} == {"stall"} and all(3 <= f.stall_s <= 8 for f in faults)


def test_a_sequence_is_read_as_written(chaos):
    faults = chaos.parse_sequence("node1,node0,kill:rank=2,stall:rank=1,s=4.5@250", 300)
    assert [(f.kind, f.target) for f in faults] == [("node", 1), ("node", 0), ("kill", 2), ("stall", 1)]
    assert faults[3].stall_s == 4.5 and faults[3].after_step == 250
    assert [f.after_step for f in faults[:3]] == sorted({f.after_step for f in faults[:3]})
    assert [f.after_step for f in chaos.parse_sequence("node0@3,node0@6", 8)] == [3, 6]


@pytest.mark.parametrize("bad", ["nod1", "kill:rank=9", "node0@8", "node1,,node0", "kill", "pause:rank=1",
                                 "uce", "hang:rank=4"])
def test_a_bad_sequence_is_refused_with_its_grammar(chaos, bad):
    with pytest.raises(SystemExit, match="chaos: "):
        chaos.parse_sequence(bad, 8)


def test_every_kind_is_read_and_the_planned_ones_become_the_ranks_own_injections(chaos, tmp_path):
    faults = chaos.parse_sequence("uce:rank=2@1,hang:rank=0@3,flip:rank=3@4,pause@5,drain:rank=1@6,kill:rank=2@7", 12)
    assert [f.name() for f in faults] == ["uce:rank=2@1", "hang:rank=0@3", "flip:rank=3@4", "pause@5",
                                          "drain:rank=1@6", "kill:rank=2@7"]
    env, flags = chaos.planned(faults, str(tmp_path))
    # each fires in the step after the one named, a flip once the update is final; the others come from outside
    assert env["MINDIO_FAULT_INJECT"].split(";") == [
        "raise:rank=2,step=2,phase=forward,msg=UCE ERROR injected by the chaos soak",
        "hang:rank=0,step=4,phase=forward", "flip:rank=3,step=5,phase=completed"]
    assert env["MINDIO_FAULT_STATE_DIR"] == str(tmp_path / "faults")
    assert flags == ["--save", str(tmp_path / "ckpt"), "--save-interval", str(chaos.FLIP_SAVE_INTERVAL)]
    assert chaos.planned(chaos.parse_sequence("kill:rank=1,pause", 8), str(tmp_path)) == ({}, [])


def test_a_planned_fault_s_place_in_its_step_picks_its_phase(chaos, tmp_path):
    faults = [chaos.Fault("uce", 1, 3, delay=d) for d in (0.1, 0.5, 0.95)]
    env, _ = chaos.planned(faults, str(tmp_path))
    assert [spec.split(",")[2] for spec in env["MINDIO_FAULT_INJECT"].split(";")] == [
        "phase=forward", "phase=backward", "phase=optimizer"]


def test_every_kind_can_be_drawn_and_a_pause_has_no_target(chaos):
    faults = [f for seed in range(30) for f in chaos.random_plan(seed, chaos.KINDS, True, 8, 300)]
    assert {f.kind for f in faults} == set(chaos.KINDS)
    assert {f.target for f in faults if f.kind == "pause"} == {-1}
    assert all(0 <= f.target < 4 for f in faults if f.kind not in ("pause", "node"))


def test_a_recovery_s_phases_are_timed_on_its_slowest_rank(chaos):
    lines = ["[mindio 00:43:48.228 rank 0] INFO recovery 1 on rank 0, step 4, stopped by the controller: detected "
             "+0.00 s, stopped +0.00 s, groups rebuilt +5.39 s (epoch 1), shard sent +5.45 s (19203184 bytes to rank "
             "2 in 0.03 s), first step done +5.81 s; first step done",
             "[mindio 00:43:48.231 rank 1] INFO recovery 1 on rank 1, step 4, HCCL_FAILED fault: detected +0.00 s, "
             "stopped +1.06 s, groups rebuilt +6.46 s (epoch 1), first step done +6.87 s; first step done",
             "[mindio 00:43:48.945 rank 3] INFO recovery 2 on rank 3, step 7, stopped by the controller: detected "
             "+0.00 s, stopped +0.05 s, handed over (hot switch) +0.06 s; handed over (hot switch)",
             " [2026-12-02 00:43:49.1] iteration        5/      10 | lm loss: 4.1"]
    assert chaos.slowest_phases(lines) == {"detected": 0.0, "stopped": 1.06, "groups rebuilt": 5.4, "shard sent": 0.06,
                                           "first step done": 0.41, "handed over (hot switch)": 0.01}
