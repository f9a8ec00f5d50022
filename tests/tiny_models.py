"""A small DeepSeek-like model (MLA, dense and MoE layers, shared experts, multi-token prediction) the search
tests plan on many candidates in seconds."""

TINY_DEEPSEEK = {"name": "tiny-deepseek", "num_layers": 12, "hidden_size": 1024, "ffn_hidden_size": 4096,
                 "num_attention_heads": 16, "head_dim": 96, "vocab_size": 32000, "gated_mlp": True,
                 "tied_embeddings": False, "moe_num_experts": 16, "moe_top_k": 4, "moe_ffn_hidden_size": 512,
                 "moe_shared_ffn_hidden_size": 512, "moe_first_dense_layers": 2, "moe_router_bias": True,
                 "mla_q_lora_rank": 384, "mla_kv_lora_rank": 256, "mla_qk_nope_head_dim": 64,
                 "mla_qk_rope_head_dim": 32, "mla_v_head_dim": 64, "mtp_layers": 1}

# Llama 4 Maverick-like: dense and MoE layers alternate (every second layer MoE, one routed and one shared expert)
TINY_MAVERICK = {"name": "tiny-maverick", "num_layers": 12, "hidden_size": 1024, "ffn_hidden_size": 4096,
                 "num_attention_heads": 16, "num_kv_heads": 8, "vocab_size": 32000, "gated_mlp": True,
                 "tied_embeddings": False, "moe_num_experts": 16, "moe_top_k": 1, "moe_ffn_hidden_size": 2048,
                 "moe_shared_ffn_hidden_size": 2048, "moe_every": 2}
