"""The workloads beside training, one room (package) each: serving, diffusion, edge, recsys, mlip. A room holds
its spec, inputs, cost, search and plan output, on the shared layers below it (meshcore, cost_models,
hardware_profiles, planner.inputs/search/outputs); nothing below imports a room. Commands stay in planner.commands.
"""
