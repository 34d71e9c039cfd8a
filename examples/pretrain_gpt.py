"""GPT pretraining on megatron.training with mock data, with mindio_adaptor installed.

    torchrun --nproc-per-node 4 examples/pretrain_gpt.py <megatron flags> [--enable-high-availability]

Every TP rank builds the same deterministic mock dataset, so no batch broadcast is needed (pipeline
parallelism is not supported by this example). At the end rank 0 prints `params digest <hex>`: a
SHA-256 over the exact bytes of every model parameter of every rank, to compare runs for bit-identity.
"""
import gc

# The imports below allocate millions of objects that live as long as the process: collecting garbage while they
# are made only scans them again and again (about a sixth of a rank's import time, measured), and once frozen no
# later collection scans them.
gc.disable()

import inspect  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402

import mindio_adaptor  # noqa: E402
from mindio_adaptor.core.process.process_ending import end_process  # noqa: E402
from mindio_adaptor.tiny.job import params_digest  # noqa: E402

mindio_adaptor.patch_all()

import torch  # noqa: E402

from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder  # noqa: E402
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset  # noqa: E402
from megatron.core.enums import ModelType  # noqa: E402
from megatron.training import get_args, get_tokenizer  # noqa: E402
from megatron.training.training import pretrain  # noqa: E402

import older_megatron  # noqa: E402  (beside this script)

gc.freeze()
gc.enable()

# pretrain's form: from megatron-core 0.18 it takes a config container built from the parsed arguments (0.18: and
# a model provider after it; 0.19: the model's config inside the container), before it parsed them itself
PRETRAIN_PARAMETERS = list(inspect.signature(pretrain).parameters)


def train_valid_test_datasets_provider(train_val_test_num_samples, vp_stage=None):
    args = get_args()
    tokenizer = get_tokenizer()
    config = GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        blend=None,
        split="1,0,0",
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=True,
        **older_megatron.dataset_config_extras(),
    )
    if args.eval_iters == 0:
        # Mock data splits its documents in three whatever `split` says; with nothing to evaluate only the train
        # third is built: the same samples, without indexing the other two (~2M samples each, seconds per rank).
        config.split_matrix = [config.split_matrix[0], None, None]
    dataset = older_megatron.in_vocabulary(MockGPTDatasetWithIds if args.log_sample_ids else MockGPTDataset)
    return BlendedMegatronDatasetBuilder(dataset, train_val_test_num_samples, lambda: True, config).build()


# Every rank calls the provider (Megatron otherwise builds data on TP rank 0 only).
train_valid_test_datasets_provider.is_distributed = True


def get_batch(data_iterator):
    batch = next(data_iterator)
    if "sample_id" in batch:
        log_sample_ids(batch["sample_id"])
    # to the accelerator, as Megatron's own get_batch does (a no-op under the CPU device layer)
    return tuple(None if t is None else t.cuda(non_blocking=True) for t in (
        batch["tokens"], batch["labels"], batch["loss_mask"], batch.get("attention_mask"), batch["position_ids"]))


def loss_func(loss_mask, output_tensor, model=None):
    losses = output_tensor.view(-1).float()
    loss_mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * loss_mask)
    num_tokens = loss_mask.sum().clone().detach().to(torch.int)
    report = torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])
    return loss, num_tokens, {"lm loss": older_megatron.loss_report(report)}


class MockGPTDatasetWithIds(MockGPTDataset):
    """--log-sample-ids: every sample also carries its index in the train dataset (what Megatron's sampler
    hands out), since the mock samples' tokens repeat."""

    def __getitem__(self, idx):
        sample = super().__getitem__(idx)
        sample["sample_id"] = torch.tensor(-1 if idx is None else int(idx))
        return sample


def log_sample_ids(sample_ids):
    """One line per micro-batch naming its samples, so that runs at different data-parallel sizes can be
    compared step by step. An evaluation's batches (read without gradients) are named apart."""
    ids = ",".join(str(int(i)) for i in sample_ids)
    when = "step" if torch.is_grad_enabled() else "evaluation after step"
    say(f"sample ids {when} {get_args().curr_iteration + 1} rank {torch.distributed.get_rank()}: {ids}")


def hold_before_step():
    """--hold-before-step N... --hold-until-file F...: the first micro-batch of step N waits until the file
    F paired with it exists (at most HOLD_LIMIT_S), once per step and process. A test's way to have the
    job reach a step only after an outside event (a node lost, a node back); the training is unchanged."""
    args = get_args()
    steps, files = args.hold_before_step or [], args.hold_until_file or []
    if len(steps) != len(files):
        raise ValueError(f"--hold-before-step names {len(steps)} steps and --hold-until-file {len(files)} files: "
                         f"one file per step")
    step = args.curr_iteration + 1
    if step not in steps or step in HELD:
        return
    HELD.add(step)
    path = files[steps.index(step)]
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            say(f"hold before step {step}: {path} did not appear within {HOLD_LIMIT_S} s; going on")
            return
        time.sleep(0.1)


HELD = set()
HOLD_LIMIT_S = 300


def forward_step(data_iterator, model, return_schedule_plan=False):
    hold_before_step()
    tokens, labels, loss_mask, attention_mask, position_ids = get_batch(data_iterator)
    output = model(tokens, position_ids, attention_mask, labels=labels)
    return output, partial(loss_func, loss_mask)


def add_example_args(parser):
    group = parser.add_argument_group("example")
    group.add_argument("--params-out", default=None, metavar="DIR",
                       help="Also save every rank's final parameters to DIR/params_rank<R>.pt.")
    group.add_argument("--log-sample-ids", action="store_true",
                       help="Print the ids of every micro-batch's samples (see log_sample_ids).")
    group.add_argument("--hold-before-step", type=int, nargs="+", default=None, metavar="N",
                       help="Each step N waits until its --hold-until-file exists (see hold_before_step).")
    group.add_argument("--hold-until-file", nargs="+", default=None, metavar="PATH")
    return parser


def say(line: str):
    """One write per line: unbuffered output from several processes then never splits a line."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    # One line per process at start and at the end: a recovery that replaced a process shows as a
    # rank with two starts or two PIDs.
    say(f"rank {os.environ.get('RANK', '?')} pid {os.getpid()} starting")
    if "cfg_container" in PRETRAIN_PARAMETERS:
        from megatron.training.argument_utils import pretrain_cfg_container_from_args
        from megatron.training.arguments import parse_and_validate_args

        args = parse_and_validate_args(extra_args_provider=add_example_args)
        if PRETRAIN_PARAMETERS[2] == "model_provider":
            pretrain(pretrain_cfg_container_from_args(args), train_valid_test_datasets_provider,
                     older_megatron.model_provider, ModelType.encoder_or_decoder, forward_step)
        else:
            from megatron.training.argument_utils import gpt_config_from_args

            pretrain(pretrain_cfg_container_from_args(args, gpt_config_from_args(args)),
                     train_valid_test_datasets_provider, ModelType.encoder_or_decoder, forward_step)
    else:
        pretrain(train_valid_test_datasets_provider, older_megatron.model_provider, ModelType.encoder_or_decoder,
                 forward_step, extra_args_provider=add_example_args)
        args = get_args()
    model = mindio_adaptor.training_model()
    digest = params_digest(model)
    if args.params_out:
        os.makedirs(args.params_out, exist_ok=True)
        params = {f"{i}.{name}": p.detach().clone() for i, chunk in enumerate(model)
                  for name, p in chunk.named_parameters()}
        torch.save(params, os.path.join(args.params_out, f"params_rank{torch.distributed.get_rank()}.pt"))
    say(f"rank {torch.distributed.get_rank()} pid {os.getpid()} done")
    if torch.distributed.get_rank() == 0:
        say(f"params digest {digest}")  # one write: a line split by another process's output is not found


if __name__ == "__main__":
    main()
    # The rank's work is written (its checkpoints, its done line, the digest): its end must come promptly whatever
    # threads torch, Megatron or a data loader left (a fresh compile cache left an idle executor thread that held
    # every rank forever), after the exit handlers a normal exit runs (the adaptor's processor and in-job
    # controller among them) and without the interpreter's teardown (core/process/process_ending). The process
    # groups are destroyed first: left to a teardown, a gloo thread still running at exit could abort a rank after
    # a successful run ("terminate called without an active exception", 3 of 15 bare 4-rank gloo runs here).
    end_process(0, who=f"rank {os.environ.get('RANK', '?')}",
                before=[torch.distributed.destroy_process_group] if torch.distributed.is_initialized() else [])
