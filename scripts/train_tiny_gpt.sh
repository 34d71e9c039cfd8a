#!/usr/bin/env bash
# The main job: a 4-process CPU (gloo) GPT pretraining on megatron.training with high availability on
# (every optimizer shard on 2 ranks, checked after every step). Extra arguments go to pretrain_gpt.py.
set -euo pipefail
cd "$(dirname "$0")/.."
FLAGS=$(python3 -c "from mindio_adaptor.tiny.job import TINY_GPT_FLAGS; print(' '.join(TINY_GPT_FLAGS))")
export CUDA_DEVICE_MAX_CONNECTIONS=1 OMP_NUM_THREADS=1
# shellcheck disable=SC2086
exec python3 -m torch.distributed.run --standalone --nproc-per-node "${NPROC:-4}" examples/pretrain_gpt.py \
    $FLAGS --train-iters "${TRAIN_ITERS:-20}" --enable-high-availability --verify-optimizer-replicas "$@"
