"""Recommendation models (`meshplan recsys`): spec (embedding tables, RecModel, RecJob, sharding kinds), inputs
(presets and tables YAML), cost (a DLRM step per GPU), search (the table-sharding ILP), plan (the plan file) and
torchrec (TorchRec's ShardingPlan, as a mapping and as a Python module)."""
