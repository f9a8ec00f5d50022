"""Graph interatomic potentials (`meshplan mlip`): spec (MlipJob, cost tables), inputs (cost-table CSV), cost
(replicas x spatial domains, ghost atoms), search and plan (the plan file)."""
