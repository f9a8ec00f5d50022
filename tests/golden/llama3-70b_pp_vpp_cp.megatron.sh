#!/usr/bin/env bash
# Megatron-LM launch for llama3-70b on 256 x h100-sxm: tp 8, pp 4, dp 4, cp 2, vpp 5, mbs 1, ZeRO-1, recompute none; predicted # s/step, MFU # %
# Written by meshplan; add data, tokenizer, optimizer and checkpoint arguments of your own.
# Runs Megatron-LM's pretrain_gpt.py from $MEGATRON_LM (default: the current folder); stops if it is not there.
# World size 256 = 32 node(s) x 8 GPUs; DP is derived by Megatron-LM.
MEGATRON_ARGS=(
  --num-layers 80
  --hidden-size 8192
  --ffn-hidden-size 28672
  --num-attention-heads 64
  --group-query-attention
  --num-query-groups 8
  --seq-length 32768
  --max-position-embeddings 32768
  --position-embedding-type rope
  --normalization RMSNorm
  --vocab-size 128256
  --swiglu
  --untie-embeddings-and-output-weights
  --disable-bias-linear
  --attention-dropout 0.0
  --hidden-dropout 0.0
  --tensor-model-parallel-size 8
  --pipeline-model-parallel-size 4
  --num-layers-per-virtual-pipeline-stage 4
  --context-parallel-size 2
  --cp-comm-type p2p
  --sequence-parallel
  --micro-batch-size 1
  --global-batch-size 64
  --use-distributed-optimizer
  --overlap-grad-reduce
  --overlap-param-gather
  --bf16
  --attention-backend flash
)

PRETRAIN="$(cd "${MEGATRON_LM:-.}" 2>/dev/null && pwd)/pretrain_gpt.py"  # absolute: torchrun may cd
if [ ! -f "$PRETRAIN" ]; then
  echo "error: no pretrain_gpt.py in ${MEGATRON_LM:-$PWD}: set MEGATRON_LM to your Megatron-LM checkout" >&2
  exit 2
fi
torchrun --nnodes 32 --nproc-per-node 8 --node-rank "${NODE_RANK:-0}" \
  --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-6000}" \
  "$PRETRAIN" "${MEGATRON_ARGS[@]}" "$@"
