"""Pure cost-model functions: FLOPs and parameters, kernel times, collectives, memory, pipeline
schedules, and the composition of one training step (`cost_models.step.evaluate_layout`)."""
