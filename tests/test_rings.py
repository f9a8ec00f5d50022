"""cost_models/comm/rings.py: NCCL's rings over a scale-up domain wired GPU to GPU (DGX-1's hybrid cube mesh, 4-GPU
SXM2 boards), against NVIDIA's description of the DGX-1 topology."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cost_models.comm.collectives import Collective, collective_time
from cost_models.comm.rings import intra_bus, ring_count
from hardware_profiles import HardwareOverrides, load_hardware
from meshcore import CollectiveSpec
from meshcore.errors import InputError, SpecError
from meshcore.mesh import Group


def test_dgx1_eight_gpus_are_three_interwoven_rings() -> None:
    """NVIDIA's DGX-1 description: six NVLinks per V100 at 25 GB/s per direction; the hybrid cube mesh "can also be
    thought of as three interwoven rings of single NVLink connections": three link-disjoint Hamiltonian cycles, each
    run both ways, six rings, 150 GB/s per direction, all of the GPU's links."""
    c = load_hardware("v100-32gb", 8)
    assert ring_count(c.collectives.links, tuple(range(8))) == 6
    assert intra_bus(c, Group.line(8, 1)) == pytest.approx(150e9 * c.scale_up.efficiency)


def test_dgx1_tp_pair_and_quad() -> None:
    """Megatron's TP pairs on the DGX-1 (GPUs 0-1, 2-3, 4-5, 6-7; nvidia-smi topo in DLPerf's README: NV1, NV2, NV1,
    NV2): the slowest pair has one link, 25 GB/s; a quad (0-3) has four or five links per GPU among its members and
    packs four rings, 100 GB/s; the pair 0-5 has no NVLink and goes through PCIe."""
    c = load_hardware("v100-32gb", 8)
    eff = c.scale_up.efficiency
    assert [ring_count(c.collectives.links, p) for p in ((0, 1), (2, 3), (4, 5), (6, 7))] == [1, 2, 1, 2]
    assert intra_bus(c, Group.line(2, 1)) == pytest.approx(25e9 * eff)
    assert intra_bus(c, Group.line(4, 1)) == pytest.approx(100e9 * eff)
    assert intra_bus(c, Group.line(2, 4)) == pytest.approx(25e9 * eff)  # 0-4, 1-5, 2-6, 3-7: NV2, NV2, NV1, NV1
    assert ring_count(c.collectives.links, (0, 5)) == 0
    flat = replace(c, collectives=replace(c.collectives, links=()))
    tp2 = collective_time(Collective.ALL_REDUCE, 64e6, 2, 1, c)
    assert tp2 > 4 * collective_time(Collective.ALL_REDUCE, 64e6, 2, 1, flat)  # 25 against 150 GB/s, less latency


def test_four_gpu_board_pairs_have_two_links() -> None:
    """The 4-GPU SXM2 board (nvidia-smi topo: NV2 between every pair, NVIDIA/nccl-tests#68): a pair gets two links
    (50 GB/s), the four GPUs six rings (150 GB/s)."""
    c = load_hardware("v100-sxm2-4gpu", 8)
    eff = c.scale_up.efficiency
    assert intra_bus(c, Group.line(2, 1)) == pytest.approx(50e9 * eff)
    assert intra_bus(c, Group.line(4, 1)) == pytest.approx(150e9 * eff)
    assert intra_bus(c, Group.line(8, 1)) == pytest.approx(150e9 * eff)  # across nodes: its domain part


def test_switched_domain_and_smaller_node() -> None:
    """A switched domain (no links) keeps the flat scale-up bandwidth for every group; a node of fewer GPUs of a
    wired board keeps its first GPUs' links."""
    h100 = load_hardware("h100-sxm", 16)
    assert intra_bus(h100, Group.line(2, 1)) == h100.scale_up.bus_bytes_per_s
    quad = load_hardware("v100-32gb", 8, HardwareOverrides(gpus_per_node=4))
    assert quad.scale_up_size == 4 and len(quad.collectives.links) == 4
    assert ring_count(quad.collectives.links, (0, 1, 2, 3)) == 4


def test_bad_link_matrices_are_refused() -> None:
    with pytest.raises(SpecError, match="symmetric"):
        CollectiveSpec(links=((0, 1), (2, 0)), link_gbs=25)
    with pytest.raises(SpecError, match="square"):
        CollectiveSpec(links=((0, 1), (1,)), link_gbs=25)
    c = load_hardware("v100-32gb", 8)
    with pytest.raises(SpecError, match="describe 8 GPUs"):
        replace(c, scale_up_size=4)


def test_profile_links_need_a_rate(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[1] / "hardware_profiles" / "v100-sxm2-4gpu.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  link_gbs: 25\n", ""))
    with pytest.raises(InputError, match="links needs link_gbs"):
        load_hardware(str(bad), 4)


def test_links_survive_a_plan_file_round_trip() -> None:
    """A self-contained plan writes the profile back (profile_mapping) and reads it again."""
    from hardware_profiles import parse_profile, profile_mapping

    for name in ("v100-32gb", "h100-sxm"):
        c = load_hardware(name, 8)
        again = parse_profile(profile_mapping(c), "round trip", num_gpus=8)
        assert again.collectives == c.collectives
