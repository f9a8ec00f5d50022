"""Collectives (NCCL's algorithm and protocol, the alpha-beta tiers) and data-parallel synchronisation."""
