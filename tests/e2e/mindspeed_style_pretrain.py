"""GPT pretraining with mock data whose faults a MindSpeed-LLM-style adaptor handles
(tests/e2e/mindspeed_style_adaptor.py, through the reference API), with mindio_adaptor's patches in
the "client" fault-handling mode. Takes the flags of examples/pretrain_gpt.py (mindio_adaptor.tiny.job
runs it with script=...); rank 0 prints `params digest <hex>` at the end.
"""
import sys

import mindio_adaptor
from mindio_adaptor.tiny.job import params_digest

mindio_adaptor.patch_all(fault_handling="client")

import torch  # noqa: E402
import megatron.training.training as megatron_training  # noqa: E402
from megatron.core.enums import ModelType  # noqa: E402
from megatron.training.argument_utils import gpt_config_from_args, pretrain_cfg_container_from_args  # noqa: E402
from megatron.training.arguments import parse_and_validate_args  # noqa: E402

import mindspeed_style_adaptor  # noqa: E402  (beside this script)
import mock_gpt_steps  # noqa: E402


def main():
    mindspeed_style_adaptor.install(megatron_training)
    args = parse_and_validate_args()
    megatron_training.pretrain(pretrain_cfg_container_from_args(args, gpt_config_from_args(args)),
                               mock_gpt_steps.datasets_provider, ModelType.encoder_or_decoder,
                               mock_gpt_steps.forward_step)
    digest = params_digest(mindio_adaptor.training_model())
    if torch.distributed.get_rank() == 0:
        mindspeed_style_adaptor.say(f"params digest {digest}")


if __name__ == "__main__":
    main()
    # As examples/pretrain_gpt.py: process groups left to interpreter teardown can abort a rank.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.exit(0)
