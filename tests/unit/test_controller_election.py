"""When an idle backup controller may lead (controller/election.h), through the bindings: with proof that the
process of the candidates' newest controller is gone, at once; without it, only once a strict majority of the
world's ranks registered with it. A candidate is (rank, term it registered under last, leader_gone)."""
import pytest

from mindio_adaptor import _native as nat


def judge(world, *candidates):
    return nat.judge_election(world, list(candidates))


@pytest.mark.parametrize("world", range(1, 10))
def test_without_proof_a_backup_leads_only_a_strict_majority(world):
    assert nat.majority_of(world) == world // 2 + 1
    for count in range(1, world + 1):
        verdict = judge(world, *[(rank, 1, False) for rank in range(count)])
        assert verdict["lead"] == (2 * count > world), (world, count)
        assert verdict["supporters"] == set(range(count))
        assert verdict["term"] == 2 and verdict["proof_rank"] == -1


def test_half_of_an_even_world_is_no_majority():
    verdict = judge(4, (2, 1, False), (3, 1, False))
    assert not verdict["lead"]
    assert verdict["why"] == ("ranks [2,3] (2 of 4 ranks, a majority is 3) lost the controller of term 1 and none "
                              "proved it gone (a silence, not a refused connection): it may still lead the others")
    verdict = judge(4, (1, 1, False), (2, 1, False), (3, 1, False))
    assert verdict["lead"] and verdict["why"] == ("ranks [1,2,3] (3 of 4 ranks, a majority) lost the controller of "
                                                  "term 1, none with proof that it is gone: leading as term 2")


def test_a_single_rank_job_is_its_own_majority():
    assert judge(1, (0, 4, False))["lead"] and judge(1, (0, 4, False))["term"] == 5


@pytest.mark.parametrize("world", [1, 2, 4, 7, 1024])
def test_one_proof_lets_a_backup_lead_any_number_of_ranks(world):
    verdict = judge(world, (0, 1, False), (world - 1, 1, True))
    assert verdict["lead"] and verdict["proof_rank"] == world - 1 and verdict["term"] == 2
    assert verdict["why"].startswith(f"rank {world - 1} found the controller of term 1 gone (its address refused a "
                                     f"connection): leading as term 2 with ")


def test_proof_counts_only_for_the_newest_term():
    # Rank 0 proved term 1's controller gone; rank 1 lost term 2's by a silence: term 2 may still lead.
    verdict = judge(5, (0, 1, True), (1, 2, False))
    assert not verdict["lead"] and verdict["term"] == 3 and verdict["proof_rank"] == -1
    assert "lost the controller of term 2" in verdict["why"]
    assert judge(5, (0, 1, True), (1, 2, True))["proof_rank"] == 1
    # Without proof, ranks of older terms still count towards the majority: none of them reaches a leader.
    assert judge(5, (0, 1, True), (1, 2, False), (2, 1, False))["lead"]


def test_a_rank_counts_once_with_its_latest_claims():
    assert not judge(4, (2, 1, False), (2, 1, False), (2, 1, False))["lead"]
    assert judge(4, (2, 1, False), (2, 1, False), (2, 1, False))["supporters"] == {2}
    # A rank that registered again without its proof (say, after the address answered again) has none now.
    assert judge(4, (2, 1, True))["lead"]
    assert not judge(4, (2, 1, True), (2, 1, False))["lead"]
    assert judge(4, (2, 1, False), (2, 1, True))["lead"]
    # Re-registering ranks never make a majority of fewer ranks.
    again = [(rank, 1, False) for rank in (0, 1, 0, 1, 1, 0)]
    assert not judge(4, *again)["lead"] and judge(5, *again, (4, 1, False))["lead"]


def test_ranks_that_never_registered_or_outside_the_world_count_for_nothing():
    assert judge(4, (0, 0, True), (1, 0, False), (2, 0, False))["lead"] is False  # term 0: never registered
    assert judge(4, (0, 0, True))["supporters"] == set()
    assert judge(3, (-1, 1, True), (3, 1, True), (7, 1, False))["supporters"] == set()
    assert not judge(3, (-1, 1, True), (3, 1, True), (0, 1, False))["lead"]
    empty = judge(4)
    assert empty == {"lead": False, "term": 0, "supporters": set(), "proof_rank": -1,
                     "why": "no rank that lost its controller registered"}


def test_the_new_term_is_one_more_than_the_newest_candidate_term():
    assert judge(3, (0, 2, False), (1, 5, False))["term"] == 6
    assert judge(3, (0, 2, False), (1, 5, False), (2, 3, False))["lead"]
