"""patches/uneven_batches: Megatron's calculator, data loader, loss and accounting at an uneven size (the
rank's side of core/layout/uneven_split), on Megatron's real calculator module and a real torch DataLoader."""
from types import SimpleNamespace

import pytest
import torch

from mindio_adaptor.core.layout.uneven_split import UnevenSplit
from mindio_adaptor.patches import uneven_batches
from mindio_adaptor.megatron import uneven


@pytest.fixture
def megatron_calculator():
    from mindio_adaptor.patches.cpu_support import prepare_python_for_megatron

    prepare_python_for_megatron()
    from megatron.core import num_microbatches_calculator as calculators

    kept = calculators._GLOBAL_NUM_MICROBATCHES_CALCULATOR
    yield calculators
    calculators._GLOBAL_NUM_MICROBATCHES_CALCULATOR = kept


def test_megatron_sees_this_ranks_share_until_its_own_calculator_is_back(megatron_calculator):
    uneven.install(UnevenSplit(16, 1, 3), dp_rank=0)
    assert megatron_calculator.get_num_microbatches() == 6
    assert megatron_calculator.get_current_global_batch_size() == 16
    assert megatron_calculator.get_micro_batch_size() == 1
    share = uneven.active()
    assert share.missing_samples() == 16 - 18
    uneven.install(UnevenSplit(16, 1, 3), dp_rank=2)
    assert uneven.active().missing_samples() == 16 - 15
    megatron_calculator.reconfigure_num_microbatches_calculator(0, None, 16, 1, 4)  # the scale-out's
    assert uneven.active() is None and megatron_calculator.get_num_microbatches() == 4


def test_the_data_loader_gives_this_ranks_micro_batches_of_each_step(megatron_calculator):
    uneven.install(UnevenSplit(16, 2, 3), dp_rank=2)  # 3, 3, 2 micro-batches
    margs = SimpleNamespace(dataloader_type="single", num_workers=0, data_parallel_size=3)
    loader = uneven.data_loader(margs, list(range(100)), consumed_samples=64, who="test")
    assert [batch.tolist() for batch in loader] == [[68, 69], [74, 75], [84, 85], [90, 91]]  # steps 5 and 6
    assert len(loader) == 4
    with pytest.raises(RuntimeError, match="'cyclic' data loaders are not supported at dp3"):
        uneven.data_loader(SimpleNamespace(**{**vars(margs), "dataloader_type": "cyclic"}), [], 0, "test")


class Optimizer:
    def scale_loss(self, loss):
        return loss * 2.0  # a loss scale of 2


def test_the_loss_is_weighted_by_the_ranks_share_unless_megatron_counts_tokens(megatron_calculator):
    uneven.install(UnevenSplit(16, 1, 3), dp_rank=1)
    optimizer = Optimizer()
    uneven.weigh_loss(SimpleNamespace(calculate_per_token_loss=False), optimizer)
    assert optimizer.scale_loss(torch.tensor(1.0)).item() == 2.0 * 15 / 16
    plain = Optimizer()
    uneven.weigh_loss(SimpleNamespace(calculate_per_token_loss=True), plain)
    assert plain.scale_loss(torch.tensor(1.0)).item() == 2.0


class Scheduler:
    def __init__(self):
        self.increments = []

    def step(self, increment):
        self.increments.append(increment)


def test_the_step_counts_the_global_batch_in_samples_and_scheduler(megatron_calculator):
    uneven.install(UnevenSplit(16, 1, 3), dp_rank=0)  # Megatron counts 3 x 1 x 6 = 18
    margs, scheduler = SimpleNamespace(consumed_train_samples=64), Scheduler()
    uneven_batches.count_the_whole_batch(margs, ({}, 0), scheduler)
    assert margs.consumed_train_samples + 18 == 80 and scheduler.increments == [-2]
    uneven_batches.count_the_whole_batch(margs, ({}, 1), scheduler)  # a skipped update stepped no scheduler
    assert scheduler.increments == [-2]
    megatron_calculator.reconfigure_num_microbatches_calculator(0, None, 16, 1, 4)
    uneven_batches.count_the_whole_batch(margs, ({}, 0), scheduler)  # an even size: Megatron's count is right
    assert scheduler.increments == [-2] and margs.consumed_train_samples == 60


def test_the_scale_outs_rebuilt_optimizer_drops_the_weight(megatron_calculator):
    """The scale-out's REPAIR: the rebuilt optimizer takes the place of the one Megatron holds
    (megatron/rebuild.take_place_of), and the weight, an attribute of the old one, goes with it."""
    from mindio_adaptor.megatron import take_place_of

    uneven.install(UnevenSplit(16, 1, 3), dp_rank=2)
    held = Optimizer()  # the object Megatron's pretrain() and train() keep
    uneven.weigh_loss(SimpleNamespace(calculate_per_token_loss=False), held)
    assert held.scale_loss(torch.tensor(1.0)).item() == 2.0 * 15 / 16
    megatron_calculator.reconfigure_num_microbatches_calculator(0, None, 16, 1, 4)  # the scale-out's sizes
    take_place_of(held, Optimizer())
    assert held.scale_loss(torch.tensor(1.0)).item() == 2.0  # train() entered again takes this one
    uneven.weigh_loss(SimpleNamespace(calculate_per_token_loss=False), held)  # no uneven share: nothing
    assert held.scale_loss(torch.tensor(1.0)).item() == 2.0
