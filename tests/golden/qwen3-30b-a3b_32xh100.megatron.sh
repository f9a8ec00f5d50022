#!/usr/bin/env bash
# Megatron-LM launch for qwen3-30b-a3b on 32 x h100-sxm: tp 2, pp 2, dp 8, cp 1, ep 4, etp 2, vpp 1, mbs 4, ZeRO-1, recompute none; predicted # s/step, MFU # %
# Written by meshplan; add data, tokenizer, optimizer and checkpoint arguments of your own.
# Runs Megatron-LM's pretrain_gpt.py from $MEGATRON_LM (default: the current folder); stops if it is not there.
# World size 32 = 4 node(s) x 8 GPUs; DP is derived by Megatron-LM.
MEGATRON_ARGS=(
  --num-layers 48
  --hidden-size 2048
  --ffn-hidden-size 6144
  --num-attention-heads 32
  --kv-channels 128
  --group-query-attention
  --num-query-groups 4
  --seq-length 4096
  --max-position-embeddings 4096
  --position-embedding-type rope
  --normalization RMSNorm
  --vocab-size 151936
  --swiglu
  --untie-embeddings-and-output-weights
  --disable-bias-linear
  --attention-dropout 0.0
  --hidden-dropout 0.0
  --qk-layernorm
  --num-experts 128
  --moe-router-topk 8
  --moe-ffn-hidden-size 768
  --moe-token-dispatcher-type alltoall
  --moe-grouped-gemm
  --expert-model-parallel-size 4
  --expert-tensor-parallel-size 2
  --tensor-model-parallel-size 2
  --pipeline-model-parallel-size 2
  --decoder-first-pipeline-num-layers 25
  --decoder-last-pipeline-num-layers 23
  --context-parallel-size 1
  --sequence-parallel
  --micro-batch-size 4
  --global-batch-size 256
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
torchrun --nnodes 4 --nproc-per-node 8 --node-rank "${NODE_RANK:-0}" \
  --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-6000}" \
  "$PRETRAIN" "${MEGATRON_ARGS[@]}" "$@"
