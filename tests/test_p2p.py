"""Send/recv and all-to-all as NCCL's grouped point-to-point operations (cost_models/comm/nccl.py, p2p_seconds),
against published nccl-tests and DeepEP figures."""

from __future__ import annotations

import pytest

from cost_models.comm.collectives import Collective, all_to_all, collective_time
from cost_models.comm.nccl import P2P_LL_MAX_BYTES
from hardware_profiles import load_hardware
from meshcore.mesh import Group


def test_small_send_recv_on_nvlink() -> None:
    """nccl-tests sendrecv_perf, two A100 of one NVLink node, 8 B: 9.85 µs (NVIDIA/nccl-tests#331). NCCL's LL base
    latency (6.6 µs) plus one NVLink hop at the profile's 4 µs: 10.6 µs, within 10 % (the old alpha-beta form said
    4 µs, -59 %)."""
    c = load_hardware("a100-80gb", 8)
    t = collective_time(Collective.SEND_RECV, 8, 2, 1, c)
    assert t * 1e6 == pytest.approx(9.85, rel=0.10)


def test_large_send_recv_on_nvlink() -> None:
    """sendrecv_perf -b 128M -e 1G on 8 A100 NVLink: 195.1 GB/s at 1 GiB (github.com/li-plus/playground,
    cuda/nccl.md): the pair's scale-up bus bandwidth, within 10 %."""
    c = load_hardware("a100-80gb", 8)
    t = collective_time(Collective.SEND_RECV, 2**30, 2, 1, c)
    assert 2**30 / t / 1e9 == pytest.approx(195.1, rel=0.10)


def test_protocol_switches_at_nccl_p2p_ll_threshold() -> None:
    """NCCL_P2P_LL_THRESHOLD (16 KiB): LL's lower base latency below, Simple's full bandwidth above."""
    c = load_hardware("a100-80gb", 8)
    below = collective_time(Collective.SEND_RECV, P2P_LL_MAX_BYTES, 2, 1, c)
    above = collective_time(Collective.SEND_RECV, P2P_LL_MAX_BYTES + 1, 2, 1, c)
    assert above > below  # Simple's base latency 8.4 µs against LL's 6.6 µs
    assert collective_time(Collective.SEND_RECV, 2 * P2P_LL_MAX_BYTES, 2, 1, c) < 2 * above


def test_intranode_all_to_all_on_h800() -> None:
    """DeepEP V1 (docs/legacy.md, H800 "~160 GB/s NVLink maximum bandwidth"): EP8 dispatch inside one node at
    153 GB/s bottleneck bandwidth (4096 tokens x 7168 x 8 experts, fp8). An all-to-all's bytes leaving each rank over
    its time at that size is the profile's NVLink bus bandwidth (200 GB/s x scale_up_efficiency 0.82, nccl-tests'
    ring share), within 10 % of DeepEP's."""
    c = load_hardware("h800", 8)
    sent = 4096 * 7168 * 8
    t = all_to_all(sent, Group.line(8, 1), c)
    assert sent * 7 / 8 / t / 1e9 == pytest.approx(153, rel=0.10)


def test_internode_all_to_all_is_nic_bound() -> None:
    """DeepEP V1 internode EP16 on H800 with one 400 Gb/s CX7 per GPU ("~50 GB/s maximum"): 43 GB/s of RDMA
    bottleneck bandwidth. The all-to-all's share leaving the node goes through each rank's own NIC at its achieved
    share (50 GB/s x 0.79 = 39.6 GB/s; NCCL's plain all-to-all, not DeepEP's NVLink-forwarded RDMA kernel), within
    15 % of DeepEP's (-11 %); the NVLink share runs beside it."""
    c = load_hardware("h800", 16)
    sent = 4096 * 7168 * 8
    t = all_to_all(sent, Group.line(16, 1), c)
    assert sent * 8 / 16 / t / 1e9 == pytest.approx(43, rel=0.15)


def test_latency_per_peer() -> None:
    """Each peer of a small all-to-all adds one latency of its tier: 16 ranks on two nodes pay 7 NVLink and 8
    network latencies over NCCL's base, 8 ranks on one node 7 NVLink ones."""
    c = load_hardware("h100-sxm", 16)
    one = all_to_all(1024, Group.line(8, 1), c)
    two = all_to_all(1024, Group.line(16, 1), c)
    assert two - one == pytest.approx(8 * c.scale_out.latency_us * 1e-6, rel=0.01)  # 512 B more on the NIC


def test_wired_domain_all_to_all_pays_its_slowest_pair() -> None:
    """On the DGX-1V GPU 0 has no NVLink to GPUs 5-7 (nvidia-smi topo in DLPerf's README): an 8-way all-to-all
    sends that share over PCIe through the host (16 GB/s shared by two GPUs), over twice as slow as the same GPUs
    behind the DGX-2's switch; a 4-GPU SXM2 board
    (NV2 between every pair) sends each peer's share over its two links."""
    dgx1 = load_hardware("v100-32gb", 8)
    flat = load_hardware("dgx2-v100", 16)
    big = 2**28
    assert all_to_all(big, Group.line(8, 1), dgx1) > 2 * all_to_all(big, Group.line(8, 1), flat)
    board = load_hardware("v100-sxm2-4gpu", 4)
    t = all_to_all(2**30, Group.line(4, 1), board)  # 256 MiB to each peer: latency under 0.5 %
    assert 2**30 / 4 / t / 1e9 == pytest.approx(50 * board.scale_up.efficiency, rel=0.01)
