"""Runs Megatron's real argument parsing and validation for several command lines in one process
(importing megatron.training takes seconds) and prints one JSON line per case."""
import json
import os
import sys

import mindio_adaptor

mindio_adaptor.patch_all()

from megatron.training.arguments import parse_args, validate_args  # noqa: E402

BASE = ["prog", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
        "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "2",
        "--train-iters", "4", "--lr", "1e-3", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128"]

for case in json.loads(sys.argv[1]):
    os.environ["WORLD_SIZE"] = str(case.get("world", 4))
    os.environ.pop("HIGH_AVAILABILITY", None)
    os.environ.update(case.get("env", {}))
    sys.argv = BASE + case["flags"]
    try:
        args = validate_args(parse_args())
        print(json.dumps({"ok": True, "instances": args.num_distributed_optimizer_instances,
                          "ha": args.enable_high_availability,
                          "repair": args.enable_hbmfault_repair}), flush=True)
    except BaseException as e:  # noqa: BLE001 - argparse exits; we report whatever stopped it
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}), flush=True)
