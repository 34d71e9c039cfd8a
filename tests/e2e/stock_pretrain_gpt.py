"""Stock Megatron GPT pretraining with mock data: mindio_adaptor's patches are not applied, except,
on a machine without an accelerator, the CPU device emulation without which Megatron cannot run.
The e2e tests run it on the installed Megatron and on a source-patched copy: a patched tree whose
adaptor is not enabled must train exactly like stock Megatron.

Rank 0 prints `megatron from <dir>` (which tree was imported) and, at the end, `params digest <hex>`.
"""
import os
import sys

from mindio_adaptor.patches import registry
from mindio_adaptor.tiny.job import params_digest

# device emulation (a no-op where a GPU or NPU exists) and the shipped dataset helpers only
registry.patch_all(only=("cpu_support", "dataset_helpers"))

import megatron.training  # noqa: E402
import torch  # noqa: E402
from megatron.core.enums import ModelType  # noqa: E402
from megatron.training.argument_utils import gpt_config_from_args, pretrain_cfg_container_from_args  # noqa: E402
from megatron.training.arguments import parse_and_validate_args  # noqa: E402
from megatron.training.training import pretrain  # noqa: E402

import mock_gpt_steps  # noqa: E402  (beside this script)

MODEL_CHUNKS = []  # as forward_step sees them: stock Megatron hands the model to nobody else


def forward_step(data_iterator, model, return_schedule_plan=False):
    if not any(chunk is model for chunk in MODEL_CHUNKS):
        MODEL_CHUNKS.append(model)
    return mock_gpt_steps.forward_step(data_iterator, model, return_schedule_plan)


def main():
    if os.environ.get("RANK") == "0":
        print(f"megatron from {os.path.dirname(os.path.dirname(megatron.training.__file__))}", flush=True)
    args = parse_and_validate_args()
    pretrain(pretrain_cfg_container_from_args(args, gpt_config_from_args(args)),
             mock_gpt_steps.datasets_provider, ModelType.encoder_or_decoder, forward_step)
    digest = params_digest(MODEL_CHUNKS)
    if torch.distributed.get_rank() == 0:
        sys.stdout.write(f"params digest {digest}\n")  # one write: never split by another process's output
        sys.stdout.flush()


if __name__ == "__main__":
    main()
    # Process groups left to interpreter teardown can abort a rank after a successful run: a gloo
    # thread still running at exit ("terminate called without an active exception", SIGABRT; 3 of 15
    # bare 4-rank gloo runs here, none of 20 with this call). Only after a successful main(): every
    # rank is past its last collective, and a failed run keeps its own error.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.exit(0)
