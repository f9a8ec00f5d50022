#!/usr/bin/env bash
# Megatron-LM launch for deepseek-v3 on 2048 x h800: tp 1, pp 16, dp 128, cp 1, ep 64, etp 1, vpp 1, mbs 1, ZeRO-1, recompute selective (moe_act layernorm mla_up_proj); predicted # s/step, MFU # %
# Written by meshplan; add data, tokenizer, optimizer and checkpoint arguments of your own.
# Runs Megatron-LM's pretrain_gpt.py from $MEGATRON_LM (default: the current folder); stops if it is not there.
# World size 2048 = 256 node(s) x 8 GPUs; DP is derived by Megatron-LM.
MEGATRON_ARGS=(
  --num-layers 61
  --hidden-size 7168
  --ffn-hidden-size 18432
  --num-attention-heads 128
  --seq-length 4096
  --max-position-embeddings 4096
  --position-embedding-type rope
  --normalization RMSNorm
  --vocab-size 129280
  --swiglu
  --untie-embeddings-and-output-weights
  --disable-bias-linear
  --attention-dropout 0.0
  --hidden-dropout 0.0
  --multi-latent-attention
  --qk-layernorm
  --q-lora-rank 1536
  --kv-lora-rank 512
  --qk-head-dim 128
  --qk-pos-emb-head-dim 64
  --v-head-dim 128
  --num-experts 256
  --moe-router-topk 8
  --moe-ffn-hidden-size 2048
  --moe-shared-expert-intermediate-size 2048
  --moe-layer-freq '[0]*3+[1]*58'
  --moe-router-score-function sigmoid
  --moe-router-enable-expert-bias
  --moe-router-num-groups 8
  --moe-router-group-topk 4
  --moe-token-dispatcher-type alltoall
  --moe-grouped-gemm
  --expert-model-parallel-size 64
  --expert-tensor-parallel-size 1
  --mtp-num-layers 1
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 16
  --decoder-first-pipeline-num-layers 4
  --decoder-last-pipeline-num-layers 1
  --context-parallel-size 1
  --micro-batch-size 1
  --global-batch-size 15360
  --recompute-granularity selective
  --recompute-modules moe_act layernorm mla_up_proj
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
torchrun --nnodes 256 --nproc-per-node 8 --node-rank "${NODE_RANK:-0}" \
  --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-6000}" \
  "$PRETRAIN" "${MEGATRON_ARGS[@]}" "$@"
