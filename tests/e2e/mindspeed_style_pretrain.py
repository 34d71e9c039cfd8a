"""GPT pretraining with mock data whose faults a MindSpeed-LLM-style adaptor handles
(tests/e2e/mindspeed_style_adaptor.py, through the reference API), with mindio_adaptor's patches in
the "client" fault-handling mode. Takes the flags of examples/pretrain_gpt.py (mindio_adaptor.tiny_job
runs it with script=...); rank 0 prints `params digest <hex>` at the end.
"""
import sys
from functools import partial

import mindio_adaptor
from mindio_adaptor.tiny_job import params_digest

mindio_adaptor.patch_all(fault_handling="client")

import torch  # noqa: E402
import megatron.training.training as megatron_training  # noqa: E402
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder  # noqa: E402
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset  # noqa: E402
from megatron.core.enums import ModelType  # noqa: E402
from megatron.training import get_args, get_tokenizer  # noqa: E402
from megatron.training.argument_utils import gpt_config_from_args, pretrain_cfg_container_from_args  # noqa: E402
from megatron.training.arguments import parse_and_validate_args  # noqa: E402

import mindspeed_style_adaptor  # noqa: E402  (beside this script)


def datasets_provider(train_val_test_num_samples, vp_stage=None):
    args = get_args()
    config = GPTDatasetConfig(
        random_seed=args.seed, sequence_length=args.seq_length, blend=None, split="1,0,0",
        tokenizer=get_tokenizer(), reset_position_ids=False, reset_attention_mask=False,
        eod_mask_loss=False, create_attention_mask=True, mid_level_dataset_surplus=0.005)
    return BlendedMegatronDatasetBuilder(MockGPTDataset, train_val_test_num_samples, lambda: True, config).build()


datasets_provider.is_distributed = True  # every rank builds the same deterministic mock data


def loss_func(loss_mask, output_tensor, model=None):
    losses, loss_mask = output_tensor.view(-1).float(), loss_mask.view(-1).float()
    loss = torch.sum(losses * loss_mask)
    num_tokens = loss_mask.sum().clone().detach().to(torch.int)
    return loss, num_tokens, {"lm loss": torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])}


def forward_step(data_iterator, model, return_schedule_plan=False):
    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], batch.get("attention_mask"), labels=batch["labels"])
    return output, partial(loss_func, batch["loss_mask"])


def main():
    mindspeed_style_adaptor.install(megatron_training)
    args = parse_and_validate_args()
    megatron_training.pretrain(pretrain_cfg_container_from_args(args, gpt_config_from_args(args)), datasets_provider,
                               ModelType.encoder_or_decoder, forward_step)
    digest = params_digest(mindio_adaptor.training_model())
    if torch.distributed.get_rank() == 0:
        mindspeed_style_adaptor.say(f"params digest {digest}")


if __name__ == "__main__":
    main()
    # As examples/pretrain_gpt.py: process groups left to interpreter teardown can abort a rank.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.exit(0)
