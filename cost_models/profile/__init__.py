"""Measurement with PyTorch: cost tables, layer, network and host profiles."""
