"""Kernel times on one GPU: FLOPs, GEMMs, attention, element-wise and FP8 kernels, MoE, the host's issue time."""
