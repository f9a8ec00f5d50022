"""A transformer pipelined over a few edge devices (`meshplan infer edge`): spec (EdgeJob), cost (per-device layer
times and memory), search (exact DP over device orders) and plan (the plan file and its summary)."""
