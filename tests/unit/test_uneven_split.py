"""core/layout/uneven_split: who takes how many of a step's micro-batches, which samples, and the loss weights that
keep the data-parallel average of the gradients the mean over the whole global batch."""
import pytest
import torch

from mindio_adaptor.core.layout.uneven_split import UnevenSplit


def test_dp3_takes_16_micro_batches_as_6_5_5_with_weights_that_sum_to_dp():
    split = UnevenSplit(global_batch_size=16, micro_batch_size=1, data_parallel_size=3)
    assert (split.total_microbatches, split.even, split.counts()) == (16, False, (6, 5, 5))
    assert [split.loss_scale(r) for r in range(3)] == [18 / 16, 15 / 16, 15 / 16]
    assert sum(split.loss_scale(r) for r in range(3)) == 3  # the average over dp3 of the weights is 1
    assert split.describe() == "6, 5, 5 micro-batches (uneven: each rank's loss weighted by its share)"


def test_every_sample_of_a_step_is_taken_exactly_once_and_in_the_full_jobs_set():
    for gbs, mbs, dp in [(16, 1, 3), (16, 2, 3), (24, 2, 5), (16, 1, 4), (12, 3, 4), (7, 1, 2)]:
        split = UnevenSplit(gbs, mbs, dp)
        for step_start in (0, gbs, 5 * gbs):
            taken = [i for r in range(dp) for batch in split.samples(r, step_start) for i in batch]
            assert sorted(taken) == list(range(step_start, step_start + gbs)), (gbs, mbs, dp)
            assert [len(split.samples(r, step_start)) for r in range(dp)] == list(split.counts())
            assert all(len(batch) == mbs for r in range(dp) for batch in split.samples(r, step_start))


def test_where_dp_divides_the_order_is_megatrons_sampler_order():
    from mindio_adaptor.patches.cpu_support import prepare_python_for_megatron

    prepare_python_for_megatron()
    from megatron.training.datasets.data_samplers import MegatronPretrainingSampler

    split = UnevenSplit(global_batch_size=16, micro_batch_size=2, data_parallel_size=4)
    for rank in range(4):
        megatron = MegatronPretrainingSampler(total_samples=80, consumed_samples=32, micro_batch_size=2,
                                              data_parallel_rank=rank, data_parallel_size=4)
        assert list(split.batches(rank, consumed_samples=32, total_samples=80)) == list(megatron), rank
        assert split.loss_scale(rank) == 1


def test_batches_run_step_after_step_from_a_step_boundary_and_stop_before_a_partial_step():
    split = UnevenSplit(global_batch_size=4, micro_batch_size=1, data_parallel_size=3)  # 2, 1, 1
    assert list(split.batches(0, consumed_samples=4, total_samples=13)) == [[4], [7], [8], [11]]
    assert list(split.batches(2, consumed_samples=4, total_samples=13)) == [[6], [10]]
    with pytest.raises(ValueError, match="consumed samples 5 are not at a step boundary"):
        next(split.batches(0, consumed_samples=5, total_samples=13))


def test_bad_sizes_are_refused_naming_them():
    with pytest.raises(ValueError, match="global batch size 15 is not a multiple of the micro-batch size 2"):
        UnevenSplit(15, 2, 3)
    with pytest.raises(ValueError, match="2 micro-batches per step leave some of dp3 without any"):
        UnevenSplit(4, 2, 3)
    with pytest.raises(ValueError, match="data-parallel rank 3 is not in dp3"):
        UnevenSplit(16, 1, 3).microbatches(3)


def test_the_weighted_average_over_ranks_is_the_gradient_of_the_global_mean_loss():
    """Megatron's normalisation (each micro-batch's mean loss divided by the rank's own micro-batch count,
    then the gradients averaged over the data-parallel ranks, as DDP does) with each rank's loss scaled
    gives the gradient of the mean over all the step's micro-batches, on a real model."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()
    data, target = torch.randn(32, 8, dtype=torch.double), torch.randn(32, 1, dtype=torch.double)

    def gradient(loss):
        model.zero_grad()
        loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    def micro_loss(ids):
        return torch.nn.functional.mse_loss(model(data[ids]), target[ids])

    for mbs, dp in [(1, 3), (2, 3), (1, 5), (2, 4)]:
        split = UnevenSplit(global_batch_size=16, micro_batch_size=mbs, data_parallel_size=dp)
        step_start = 16
        whole = [split.samples(r, step_start) for r in range(dp)]
        reference = gradient(sum(micro_loss(b) for batches in whole for b in batches) / split.total_microbatches)
        per_rank = [gradient(split.loss_scale(r) * sum(micro_loss(b) / split.microbatches(r) for b in whole[r]))
                    for r in range(dp)]
        averaged = torch.stack(per_rank).mean(dim=0)
        assert torch.allclose(averaged, reference, rtol=1e-12, atol=1e-15), (mbs, dp)
        if not split.even:  # without the weights the ranks' shares would be wrong
            plain = torch.stack([g / split.loss_scale(r) for r, g in enumerate(per_rank)]).mean(dim=0)
            assert not torch.allclose(plain, reference, rtol=1e-6), (mbs, dp)
