"""The data and step functions the e2e test scripts hand to Megatron's `pretrain`: mock GPT data every
rank builds the same way, and the plain language-model loss. Imported by a script after it chose its
patches (importing this imports Megatron)."""
from functools import partial

import torch
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset
from megatron.training import get_args, get_tokenizer


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
