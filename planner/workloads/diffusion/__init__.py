"""Diffusion transformers (`meshplan infer diffusion`): spec (DiffusionModel, DiffusionJob, DiffusionLayout), inputs
(presets), cost (denoising step, memory), comm (Ulysses, ring, PipeFusion traffic), parts (text encoders, VAE),
search, xfuser (xDiT launch arguments) and plan (the plan file and its summary)."""
