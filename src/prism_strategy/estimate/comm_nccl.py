"""NCCL's choice and cost of one collective, from NCCL's own model (data/nccl_tuning.toml, transcribed
from NVIDIA/nccl src/graph/tuning.cc and search.cc). Per call NCCL times every enabled
(algorithm, protocol) as `latency + bytes / bandwidth` and runs the fastest (enqueue.cc
topoGetAlgoInfo); this module does the same for ring (every collective) and tree (all-reduce).

Inputs from the platform: GPU generation (`gpu_arch`), NVLinks per GPU (`nvlink_links`, 0 = PCI;
capped by intra_bw_gbps), NICs (`nic_bw_gbps`, `nics_per_node`) and the CPU vendor (NCCL's network overhead). What NCCL's
topology search would find is reduced to its outcome: channels x GB/s per channel, the fastest
speed of the generation's list that the links carry (one channel per NIC across nodes), then
ncclTopoDupChannels' doubling. Left out, so a plan prices what remains: NVLS / NVLS-Tree
(NVSwitch multicast), CollNet (SHARP), PAT (one GPU per node), tuner plugins, the Tree
graph's own search (its channels are taken as the ring's).
A platform's `nccl_scale` (fitted by `calibrate` to measured curves, bench/fit/comm_fit.py)
multiplies the base latencies, the NVLink/PCI and network hop latencies, and every bandwidth of a
one-node or a multi-node group: what a fabric NCCL's constants do not describe (a TCP-based NIC
path, a slower switch) shows up there, and the algorithm choice follows the scaled costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from prism_strategy.estimate.ring import ring_steps
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.presets import DATA, read_toml

PROTOS = ("LL", "LL128", "Simple")


@lru_cache(maxsize=1)
def tuning() -> dict[str, Any]:
    return read_toml(DATA / "nccl_tuning.toml")


@dataclass(frozen=True, slots=True)
class Choice:
    seconds: float
    algorithm: str
    protocol: str
    channels: int = 0
    """CUDA blocks (one SM each) the call's kernel runs on: call_channels()."""

    @property
    def name(self) -> str:
        return f"nccl {self.algorithm}/{self.protocol}"


def arch_index(p: PlatformSpec) -> int:
    t = tuning()
    return t["archs"].index(p.hardware.gpu_arch) if p.hardware.gpu_arch in t["archs"] else t["archs"].index("hopper")


def channels(p: PlatformSpec, nodes: int, ppn: int) -> tuple[int, float]:
    """(channels, GB/s per channel) of the ring graph: search.cc tries speeds from the top and keeps
    the first the links carry; across nodes each channel enters and leaves through one NIC."""
    s, a = tuning()["search"], arch_index(p)
    link = (
        min(p.hardware.nvlink_links * s["nvlink_gbps_per_link"][a], p.links.intra_bw_gbps)
        if p.hardware.nvlink_links
        else s["pci_gbps"]
    )
    if nodes == 1:
        speeds, cap, total = s["intra"][a], link, link
    else:
        nics = max(
            1, p.links.nics_per_node * ppn // p.hardware.devices_per_node
        )  # a group of ppn GPUs reaches its own NICs
        speeds, cap, total = s["inter"][a], min(p.links.nic_bw_gbps, link), min(nics * p.links.nic_bw_gbps, link)
    speed = next((x for x in speeds if x <= cap), speeds[-1])
    per_nic = max(1, int(p.links.nic_bw_gbps // speed)) if nodes > 1 else 0
    n = max(1, min(s["max_channels"], int(total // speed) if nodes == 1 else nics * per_nic))
    dup = speed >= s["dup_min_gbps"] and not (a >= 2 and speed < s["dup_hopper_min_gbps"] and n > 4)
    if dup:
        doubled = min(2 * n, s["max_channels"])
        speed, n = speed / math.ceil(doubled / n), doubled
    return n, speed


def compute_channels(p: PlatformSpec, nodes: int, ppn: int) -> int:
    """The communicator's channels, each one CUDA block (so one SM) of every collective kernel
    (data/nccl_tuning.toml [kernel]): connect.cc ncclTopoPostset doubles the search's channels
    (capped at MAXCHANNELS) and, on Hopper across nodes at > 45 GB/s per channel, doubles again below 16."""
    k, a = tuning()["kernel"], arch_index(p)
    search, speed = channels(p, nodes, ppn)
    nc = min(k["max_channels"], k["postset_factor"] * search)
    if a >= 2 and nodes > 1 and speed > k["hopper_nodes_min_gbps"] and nc < k["hopper_nodes_below"]:
        nc = min(k["max_channels"], 2 * nc)
    return nc


def call_channels(nc: int, algo: str, proto: str, size: float, ranks: int) -> int:
    """Channels one call runs on: enqueue.cc topoGetAlgoInfo drops channels while
    bytes < channels x threads x threshold (ring LL's threshold x ranks)."""
    k = tuning()["kernel"]
    threshold = k["thread_threshold"][proto] * (ranks if (algo, proto) == ("ring", "LL") else 1)
    per_channel = k["max_threads"][proto] * threshold
    while size < nc * per_channel and nc >= 2:
        nc -= 1
    return nc


def _index2(nodes: int) -> int:
    return min(nodes, 3) - 1


def bandwidths(p: PlatformSpec, op: str, ranks: int, nodes: int, concurrent: int) -> dict[tuple[str, str], float]:
    """Algorithm bandwidth (GB/s of the call's buffer) per (algorithm, protocol), ncclTopoTuneModel."""
    t, a, i2 = tuning(), arch_index(p), _index2(nodes)
    caps, ref = t["bandwidth_caps_gbps"], t["refinements"]
    ppn = max(1, ranks // nodes)
    n, speed = channels(p, nodes, ppn)
    bus = n * speed
    if nodes > 1 and concurrent > 1:  # groups running at once share the node's NICs
        bus = min(bus, p.links.nics_per_node * p.links.nic_bw_gbps / concurrent)
    row = a if nodes == 1 else (1 if p.hardware.cpu_vendor == "amd" else 0)
    ll_max = caps["ll_max"][row][i2]
    steps = ring_steps(op, ranks)
    ll128 = p.hardware.nvlink_links > 0  # LL128 needs NVLink inside the node (typeIntra <= PATH_NVB)
    out = {("ring", "LL"): min(ll_max, bus * ref["ring_ll_factor"]), ("ring", "Simple"): bus}
    if ll128:
        out[("ring", "LL128")] = min(bus * ref["ring_ll128_factor"], n * caps["ring_ll128_per_channel"][a][i2])
    out = {k: v * ranks / steps for k, v in out.items()}  # bus bandwidth -> algorithm bandwidth
    if op == "all_reduce":
        tree = min(bus * ref["tree_factor"], n * caps["tree_per_channel"][a][i2])
        out[("tree", "LL")] = 0.5 * min(tree * ref["tree_ll_factor"], ll_max)
        out[("tree", "Simple")] = 0.5 * tree
        if ll128:
            f = ref["tree_ll128_factor_one_node"] if nodes == 1 else ref["tree_ll128_factor_nodes"]
            out[("tree", "LL128")] = 0.5 * min(tree * f, n * caps["tree_ll128_per_channel"][a][i2])
    scale = p.nccl.nccl_scale.get("inter_bw" if nodes > 1 else "intra_bw", 1.0)
    return {k: v * scale for k, v in out.items()}


def latency_us(p: PlatformSpec, op: str, algo: str, proto: str, ranks: int, nodes: int) -> float:
    """ncclTopoTuneModel's latency: base + per-step hardware latency of the hop each step crosses
    (ring: intra-node steps at the NVLink/PCI latency, 2(nodes-1) or nodes-1 at the network's;
    tree all-reduce: 2 x ((ppn-1) intra + log2(nodes) network hops)."""
    t, j = tuning(), PROTOS.index(proto)
    hw, ref = t["hw_latency_us"], t["refinements"]
    ppn = max(1, ranks // nodes)
    intra = hw["nvlink" if p.hardware.nvlink_links else "pci"][algo][j]
    inter = hw["net"]["tree" if ppn == 1 else algo][j]
    k = p.nccl.nccl_scale
    lat, inter = t["base_latency_us"][algo][j] * k.get("base_latency", 1.0), inter * k.get("net_latency", 1.0)
    if algo == "tree":
        return lat + 2 * ((ppn - 1) * intra * k.get("intra_latency", 1.0) + int(math.log2(nodes)) * inter)
    if nodes > 1:
        over = ref["net_overhead_us"].get(p.hardware.cpu_vendor, ref["net_overhead_us"]["other"])
        intra = max(intra, over * (ref["net_overhead_simple_factor"] if proto == "Simple" else 1.0))
    intra *= k.get("intra_latency", 1.0)
    steps = ring_steps(op, ranks)
    inter_steps = ring_steps(op, nodes)  # 0 on one node
    return lat + (steps - inter_steps) * intra + inter_steps * inter


TOPOLOGY = (
    "gpu_arch",
    "nvlink_links",
    "intra_bw_gbps",
    "nic_bw_gbps",
    "nics_per_node",
    "devices_per_node",
    "cpu_vendor",
    "nccl_scale",
)
"""The platform fields NCCL's model reads: the key of the per-group tables cached below."""


Rows = tuple[tuple[str, str, float, float], ...]


@lru_cache(maxsize=4096)
def _table(topo: tuple, op: str, ranks: int, nodes: int, concurrent: int) -> tuple[Rows, float, float, int]:
    """((algorithm, protocol, latency us, bandwidth GB/s) per enabled pair, the ring plateau:
    the bytes per call from which ring/Simple all-reduce latency is multiplied, and by how much,
    and the communicator's compute channels)."""
    p = PlatformSpec.from_flat(
        {
            "name": "nccl-topology",
            "device": "cuda",
            "backend": "nccl",
            "memory_gib": 1.0,
            "peak_tflops_bf16": 1.0,
            "peak_tflops_fp32": 1.0,
            "hbm_bw_gbps": 1.0,
            "intra_ring_bw_gbps": 1.0,
            "intra_latency_us": 0.0,
            "inter_latency_us": 0.0,
        }
        | dict(zip(TOPOLOGY, topo))
        | {"nccl_scale": dict(topo[-1])}
    )
    n, _ = channels(p, nodes, max(1, ranks // nodes))
    ref = tuning()["refinements"]
    rows = []
    for (algo, proto), bw in bandwidths(p, op, ranks, nodes, concurrent).items():
        if bw > 0:
            rows.append((algo, proto, latency_us(p, op, algo, proto, ranks, nodes), bw))
    factor = ref["ring_plateau_factor"] if arch_index(p) >= 1 else ref["ring_plateau_factor_pre_ampere"]
    start = n * ranks * ref["ring_plateau_min_bytes"] if nodes > 1 and op == "all_reduce" else math.inf
    return tuple(rows), start, factor, compute_channels(p, nodes, max(1, ranks // nodes))


def nccl_choice(p: PlatformSpec, op: str, size: float, ranks: int, nodes: int, concurrent: int = 1) -> Choice:
    """The (algorithm, protocol) NCCL picks for one call of `size` bytes (the gathered output of an
    all-gather, the unscattered input of a reduce-scatter: NCCL's nBytes) and its time."""
    return nccl_choice_by_topology(nccl_topology(p), op, size, ranks, nodes, concurrent)


def nccl_topology(p: PlatformSpec) -> tuple:
    """The platform fields NCCL's model reads (TOPOLOGY), as a cache key."""
    return (
        p.hardware.gpu_arch,
        p.hardware.nvlink_links,
        p.links.intra_bw_gbps,
        p.links.nic_bw_gbps,
        p.links.nics_per_node,
        p.hardware.devices_per_node,
        p.hardware.cpu_vendor,
        tuple(sorted(p.nccl.nccl_scale.items())),
    )


@lru_cache(maxsize=8192)
def nccl_choice_by_topology(topo: tuple, op: str, size: float, ranks: int, nodes: int, concurrent: int) -> Choice:
    """nccl_choice by value: a plan prices the same calls for every batch and checkpointing it tries."""
    rows, plateau_from, plateau, nc = _table(topo, op, ranks, nodes, concurrent)
    corrections = tuning()["refinements"]["tree_correction"]
    log_size = int(math.log2(max(size, 64) / 64))
    best, pick = math.inf, ("ring", "Simple")
    for algo, proto, lat, bw in rows:
        if algo == "tree" and log_size < 23:
            bw *= corrections[PROTOS.index(proto)][log_size]
        if proto == "Simple" and algo == "ring" and size >= plateau_from:
            lat *= plateau
        us = lat + size / (1000 * bw)
        if us < best:
            best, pick = us, (algo, proto)
    return Choice(best * 1e-6, *pick, channels=call_channels(nc, *pick, size, ranks))
