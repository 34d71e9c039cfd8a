"""What examples/pretrain_gpt.py does differently on megatron-core releases before 0.19 (docs/megatron_versions.md).
Each difference is read from what the release offers, not from its version number."""
import dataclasses
import inspect

import torch
from megatron.core import mpu
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTLowLevelDataset
from megatron.training import get_args
from megatron.training import training as megatron_training


def dataset_config_extras() -> dict:
    """GPTDatasetConfig's mid_level_dataset_surplus came in 0.13."""
    fields = {f.name for f in dataclasses.fields(GPTDatasetConfig)}
    return {"mid_level_dataset_surplus": 0.005} if "mid_level_dataset_surplus" in fields else {}


def model_provider(pre_process=True, post_process=True, vp_stage=None, config=None, pg_collection=None):
    """The GPT of Megatron's core models for versions whose pretrain takes a model provider (before 0.18):
    the layer spec of Megatron's own modules or of Transformer Engine, by --transformer-impl. Megatron
    passes the stage, its config and its process groups where its version has them."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.training.arguments import core_transformer_config_from_args

    args = get_args()
    config = config or core_transformer_config_from_args(args)
    if args.num_experts:
        spec = gpt_layer_specs.get_gpt_decoder_block_spec(
            config, use_transformer_engine=args.transformer_impl == "transformer_engine",
            normalization=args.normalization)
    else:
        build = (gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec
                 if args.transformer_impl == "transformer_engine" else gpt_layer_specs.get_gpt_layer_local_spec)
        spec = build(num_experts=args.num_experts, moe_grouped_gemm=args.moe_grouped_gemm,
                     qk_layernorm=args.qk_layernorm, multi_latent_attention=args.multi_latent_attention)
    extra = {name: value for name, value in (("vp_stage", vp_stage), ("pg_collection", pg_collection))
             if value is not None}
    return GPTModel(config=config, transformer_layer_spec=spec, vocab_size=args.padded_vocab_size,
                    max_sequence_length=args.max_position_embeddings, pre_process=pre_process,
                    post_process=post_process, fp16_lm_cross_entropy=args.fp16_lm_cross_entropy,
                    parallel_output=True,
                    share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
                    position_embedding_type=args.position_embedding_type, rotary_percent=args.rotary_percent,
                    rotary_base=args.rotary_base, **extra)


# Before megatron-core 0.16 (at the latest) train_step summed (loss, tokens) pairs already reduced over the
# data-parallel ranks by the loss function; later it takes each rank's [loss, tokens] and reduces them itself.
_REPORT_REDUCED_BY_THE_LOSS_FUNCTION = "isinstance(val, tuple)" in inspect.getsource(megatron_training)


def loss_report(report: torch.Tensor):
    """The loss function's report of [loss, tokens] in the form the release's train_step takes."""
    if not _REPORT_REDUCED_BY_THE_LOSS_FUNCTION:
        return report
    torch.distributed.all_reduce(report, group=mpu.get_data_parallel_group())
    return report[0], report[1]


def in_vocabulary(dataset_class):
    """`dataset_class`, whose mock documents stay inside the vocabulary on every release (InVocabularyLowLevel)."""
    if "vocab_size" in inspect.getsource(MockGPTLowLevelDataset.__init__):
        return dataset_class
    return type(dataset_class.__name__, (_InVocabulary, dataset_class), {})


class InVocabularyLowLevel(MockGPTLowLevelDataset):
    """Before megatron-core 0.13 the mock documents count their tokens up to 4095 whatever the vocabulary; as
    later versions do, the tokens are taken modulo the vocabulary (the end-of-document token stays)."""

    def __getitem__(self, idx):
        sample = super().__getitem__(idx)
        sample[:-1] %= self.tokenizer.vocab_size
        return sample


class _InVocabulary:
    """Mixed into a mock dataset class: its documents come from InVocabularyLowLevel."""

    @staticmethod
    def build_low_level_dataset(dataset_path, config):
        return InVocabularyLowLevel(config.tokenizer)
