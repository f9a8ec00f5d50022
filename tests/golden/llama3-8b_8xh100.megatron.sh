#!/usr/bin/env bash
# Megatron-LM launch for llama3-8b on 8 x h100-sxm: tp 1, pp 1, dp 8, cp 1, vpp 1, mbs 1, ZeRO-2, recompute none; predicted # s/step, MFU # %
# Written by meshplan; add data, tokenizer, optimizer and checkpoint arguments of your own.
# Runs Megatron-LM's pretrain_gpt.py from $MEGATRON_LM (default: the current folder); stops if it is not there.
# World size 8 = 1 node(s) x 8 GPUs; DP is derived by Megatron-LM.
MEGATRON_ARGS=(
  --num-layers 32
  --hidden-size 4096
  --ffn-hidden-size 14336
  --num-attention-heads 32
  --group-query-attention
  --num-query-groups 8
  --seq-length 8192
  --max-position-embeddings 8192
  --position-embedding-type rope
  --normalization RMSNorm
  --vocab-size 128256
  --swiglu
  --untie-embeddings-and-output-weights
  --disable-bias-linear
  --attention-dropout 0.0
  --hidden-dropout 0.0
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 1
  --context-parallel-size 1
  --micro-batch-size 1
  --global-batch-size 64
  --use-megatron-fsdp
  --data-parallel-sharding-strategy optim_grads
  --overlap-grad-reduce
  --bf16
  --attention-backend flash
)

PRETRAIN="$(cd "${MEGATRON_LM:-.}" 2>/dev/null && pwd)/pretrain_gpt.py"  # absolute: torchrun may cd
if [ ! -f "$PRETRAIN" ]; then
  echo "error: no pretrain_gpt.py in ${MEGATRON_LM:-$PWD}: set MEGATRON_LM to your Megatron-LM checkout" >&2
  exit 2
fi
torchrun --nnodes 1 --nproc-per-node 8 --node-rank "${NODE_RANK:-0}" \
  --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-6000}" \
  "$PRETRAIN" "${MEGATRON_ARGS[@]}" "$@"
