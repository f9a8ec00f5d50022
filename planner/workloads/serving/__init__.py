"""LLM serving (`meshplan infer serve`): spec (ServingJob, ServingLayout), engine and engines (vLLM/SGLang profiles),
iteration (the engine's per-iteration time), cost (a deployment's TTFT, TPOT, throughput), search, launch (vLLM
and SGLang commands) and plan (the plan file and its summary). One replica's roofline is cost_models.inference."""
