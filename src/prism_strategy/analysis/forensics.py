"""What grew in a collapse: the capture's records (runtime/forensics.py) of the healthy baseline
window against the collapse window, per rank, and a classification with the experiment that
would settle it. Pure: dicts in, a JSON-ready dict out (no torch).

Per rank, each quantity is the median over its window's steps: backward wall and process CPU
time, each collective's time per step by (op, phase) and per call index (the unit it served;
host enqueue-to-return, or enqueue-to-completion for an async call whose future said when), GC pause time per phase, and the allocator's reserved bytes and cumulative
``num_alloc_retries``. The backward's growth ``dW`` (after - before) is what must be explained:

* allocator-bound: ``num_alloc_retries`` rose during the collapse window (each retry frees the
  cache and calls the device allocator again, synchronously), or reserved memory grew by a
  tenth in step with it (device-only: CPU has no caching allocator);
* host-bound: GC pauses in backward grew by >= 0.3 dW (garbage collection), or the backward's
  host time (CPU time plus run-queue wait: on a loaded host a CPU second takes several wall
  seconds, the rest spent waiting for a core) grew by >= half of dW, its CPU time by >= a tenth,
  and the collectives explain at most half;
* collective-bound: the collectives' host time in backward grew by >= half of dW. The op named is
  the one first in issue order that grew (on a rank, by >= a quarter of its dW): a slow op on
  some ranks makes the others wait in the *next* collective they share with them, so the later
  growth is waiting, the first is the cause; its ranks are named as all ranks, a node, or a
  local rank (tile index) on every node, from each rank's meta record;
* otherwise unexplained.
"""

from __future__ import annotations

import math
from collections import defaultdict
from statistics import median
from typing import Any, Iterable

__all__ = ["analyze_forensics", "EXPERIMENTS"]

MIN_GROWTH_S = 0.001
"""A quantity grew only by at least a millisecond per step (below: timer and scheduler noise)."""
OP_SHARE = 0.25
"""A quantity grew on a rank when it rose by this share of that rank's backward growth (and 1.5x)."""
COLLECTIVE_SHARE = 0.5
CPU_SHARE = 0.5
MIN_CPU_ALONE = 0.1
GC_SHARE = 0.3
RESERVED_GROWTH = 0.1

EXPERIMENTS = {
    "collective": "rerun with CCL_ATL_SYNC_COLL=1 (oneCCL; NCCL: NCCL_LAUNCH_MODE=GROUP) - if the "
    "collapse goes, it is the library's asynchronous progress; and time {op} alone at this size "
    "between the same ranks (`prism-strategy commbench`)",
    "collective_group": "rerun with one node fewer, leaving out {group}: is one node's NIC or link slow?",
    "allocator": "rerun with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or a smaller micro-batch): "
    "if retries and the collapse go, it is fragmentation of the caching allocator",
    "host_gc": "call gc.freeze() after warm-up (then gc.collect() only every N steps): if the pauses and "
    "the collapse go, it is Python's garbage collector",
    "host_cpu": "rerun with each rank pinned to its own cores and nothing else on the node (check `top`); "
    "if the collapse goes, it is the host (CPU contention, a busy host thread)",
    "unexplained": "capture one torch.profiler step inside the collapse: what the backward waits on is "
    "none of the collectives, GC pauses, host CPU or allocator retries",
}


def _med(xs: Iterable[float]) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return median(xs) if xs else math.nan


def _per_step(rec: dict[str, Any]) -> dict[tuple, float]:
    """One captured step -> {quantity key: value}."""
    out: dict[tuple, float] = {}
    for ph, v in (rec.get("wall") or {}).items():
        out[("wall", ph)] = float(v)
    for ph, v in (rec.get("cpu") or {}).items():
        out[("cpu", ph)] = float(v)
    for ph, v in (rec.get("runq_wait") or {}).items():
        out[("runq", ph)] = float(v)
    for row in rec.get("collectives") or ():
        key = ("collective", row["op"], row["phase"])
        times = row.get("done_s") or row.get("host_s") or ()  # async calls: enqueue to completion
        out[key] = out.get(key, 0.0) + sum(times)
        for i, t in enumerate(times):
            out[("unit", row["op"], row["phase"], i)] = out.get(("unit", row["op"], row["phase"], i), 0.0) + t
        out[("first", row["op"], row["phase"])] = min(
            out.get(("first", row["op"], row["phase"]), math.inf), row.get("first_call", 0)
        )
    out[("gc", "backward")] = 0.0
    for ph, g in (rec.get("gc") or {}).items():
        out[("gc", ph)] = float(g.get("pause_s", 0.0))
    alloc = rec.get("allocator") or {}
    if alloc.get("available"):
        for k in ("reserved_bytes", "num_alloc_retries"):
            if isinstance(alloc.get(k), (int, float)):
                out[("allocator", k)] = float(alloc[k])
    return out


def _windows(records: list[dict[str, Any]]) -> dict[str, dict[int, dict[tuple, float]]]:
    """{window: {rank: {key: median over steps}}} (retries: the window's last value)."""
    steps: dict[str, dict[int, list[dict[tuple, float]]]] = defaultdict(lambda: defaultdict(list))
    for rec in records:
        steps[rec.get("window", "?")][int(rec["rank"])].append(_per_step(rec))
    out: dict[str, dict[int, dict[tuple, float]]] = {}
    for win, by_rank in steps.items():
        out[win] = {}
        for rank, rows in by_rank.items():
            keys = {k for r in rows for k in r}
            agg = {k: _med(r.get(k, 0.0 if k[0] in ("collective", "unit") else math.nan) for r in rows) for k in keys}
            if ("allocator", "num_alloc_retries") in keys:
                vals = [r[("allocator", "num_alloc_retries")] for r in rows if ("allocator", "num_alloc_retries") in r]
                agg[("allocator", "num_alloc_retries")] = max(vals)
                agg[("allocator", "retries_in_window")] = max(vals) - min(vals)
            out[win][rank] = agg
    return out


def _group_name(ranks: list[int], all_ranks: list[int], meta: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """All ranks, a node (or nodes), a local rank on every node, or a list."""
    if sorted(ranks) == sorted(all_ranks):
        return {"group": "all ranks", "ranks": sorted(ranks)}
    node = {r: meta.get(r, {}).get("node") for r in all_ranks}
    if all(v is None for v in node.values()):  # no ranks_per_node: hosts stand for nodes
        hosts = sorted({str(meta.get(r, {}).get("host", "?")) for r in all_ranks})
        node = {r: hosts.index(str(meta.get(r, {}).get("host", "?"))) if len(hosts) > 1 else None for r in all_ranks}
    nodes = sorted({node[r] for r in ranks if node[r] is not None})
    if nodes and all(node[r] in nodes for r in ranks) and {r for r in all_ranks if node[r] in nodes} == set(ranks):
        word = "node" if len(nodes) == 1 else "nodes"
        return {"group": f"{word} {', '.join(map(str, nodes))}", "nodes": nodes, "ranks": sorted(ranks)}
    local = {meta.get(r, {}).get("local_rank") for r in ranks}
    if len(local) == 1 and None not in local and len(set(node.values()) - {None}) > 1:
        tile = local.pop()
        if {r for r in all_ranks if meta.get(r, {}).get("local_rank") == tile} == set(ranks):
            return {"group": f"local rank (tile) {tile} on every node", "local_rank": tile, "ranks": sorted(ranks)}
    return {"group": "ranks " + ", ".join(map(str, sorted(ranks))), "ranks": sorted(ranks)}


def _row(
    name_key: str, name: str, phase: str | None, ranks: list[int], before: list[float], after: list[float], unit: str
):
    return {
        name_key: name,
        "phase": phase,
        "ranks": sorted(ranks),
        "before": _round(_med(before), unit),
        "after": _round(_med(after), unit),
        "unit": unit,
    }


def _round(x: float, unit: str) -> float | None:
    if not math.isfinite(x):
        return None
    return round(x, 6) if unit == "s" else round(x)


def _quantities(before: dict[int, dict], after: dict[int, dict], ranks: list[int]) -> list[tuple]:
    """Every key seen in either window, comparable per rank (units and first-call order aside)."""
    keys = {k for r in ranks for k in list(before[r]) + list(after[r]) if k[0] not in ("unit", "first")}
    order = {"wall": 0, "cpu": 1, "runq": 2, "collective": 3, "gc": 4, "allocator": 5}
    return sorted(keys, key=lambda k: (order.get(k[0], 9), [str(x) for x in k[1:]]))


def _describe(key: tuple) -> tuple[str, str, str | None, str]:
    """(name key, name, phase, unit) of a quantity."""
    kind = key[0]
    if kind == "collective":
        return "op", key[1], key[2], "s"
    if kind in ("wall", "cpu", "runq"):
        return (
            "name",
            {"wall": "host wall time", "cpu": "host CPU time", "runq": "waiting for a core"}[kind],
            key[1],
            "s",
        )
    if kind == "gc":
        return "name", "GC pauses", key[1], "s"
    unit = "bytes" if key[1] == "reserved_bytes" else "count"
    return "name", key[1], None, unit


def _table(before, after, ranks) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(table: every quantity over all ranks, grew: the ones that grew, on the ranks they grew on)."""
    table, grew = [], []
    dw = {
        r: after[r].get(("wall", "backward"), math.nan) - before[r].get(("wall", "backward"), math.nan) for r in ranks
    }
    for key in _quantities(before, after, ranks):
        nk, name, phase, unit = _describe(key)
        default = 0.0 if key[0] in ("collective", "gc") else math.nan
        b = {r: before[r].get(key, default) for r in ranks}
        a = {r: after[r].get(key, default) for r in ranks}
        table.append(_row(nk, name, phase, ranks, list(b.values()), list(a.values()), unit))
        on = [r for r in ranks if _grew(key, b[r], a[r], dw[r])]
        if on:
            grew.append(_row(nk, name, phase, on, [b[r] for r in on], [a[r] for r in on], unit))
    return table, grew


def _grew(key: tuple, b: float, a: float, dw: float) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    if key[0] == "allocator":
        return a > b * (1 + RESERVED_GROWTH) if key[1] == "reserved_bytes" else a > b
    need = max(MIN_GROWTH_S, OP_SHARE * dw if math.isfinite(dw) and key != ("wall", "backward") else MIN_GROWTH_S)
    return a - b >= need and a >= 1.5 * b


def _shares(before, after, ranks) -> dict[str, float]:
    """Median over ranks of each explanation's growth as a share of the backward's growth."""
    coll, cpu, gc, dws, raw = [], [], [], [], []
    for r in ranks:
        b, a = before[r], after[r]
        dw = a.get(("wall", "backward"), math.nan) - b.get(("wall", "backward"), math.nan)
        if not (math.isfinite(dw) and dw > MIN_GROWTH_S):
            continue
        dws.append(dw)
        keys = {k for k in list(a) + list(b) if k[0] == "collective" and k[2] == "backward"}
        coll.append(sum(a.get(k, 0.0) - b.get(k, 0.0) for k in keys) / dw)
        dcpu = a.get(("cpu", "backward"), math.nan) - b.get(("cpu", "backward"), math.nan)
        dq = a.get(("runq", "backward"), 0.0) - b.get(("runq", "backward"), 0.0)
        raw.append(dcpu / dw)
        cpu.append((dcpu + dq) / dw)
        gc.append((a.get(("gc", "backward"), 0.0) - b.get(("gc", "backward"), 0.0)) / dw)
    return {
        "backward_growth_s": round(_med(dws), 6) if dws else None,
        "collective": round(_med(coll), 3) if coll else None,
        "cpu": round(_med(cpu), 3) if cpu else None,
        "gc": round(_med(gc), 3) if gc else None,
        "cpu_alone": round(_med(raw), 3) if raw else None,
    }


def _allocator_grew(grew: list[dict[str, Any]], after: dict[int, dict]) -> bool:
    retries = any(a.get(("allocator", "retries_in_window"), 0) > 0 for a in after.values())
    return retries or any(g.get("name") in ("num_alloc_retries", "reserved_bytes") for g in grew)


def _cause_op(before, after, ranks) -> dict[str, Any] | None:
    """The collective first in issue order that grew in backward, and the ranks it grew on."""
    found: dict[str, list[int]] = defaultdict(list)
    first: dict[str, list[float]] = defaultdict(list)
    for r in ranks:
        dw = after[r].get(("wall", "backward"), math.nan) - before[r].get(("wall", "backward"), math.nan)
        for k in after[r]:
            if k[0] == "collective" and k[2] == "backward" and _grew(k, before[r].get(k, 0.0), after[r][k], dw):
                found[k[1]].append(r)
                first[k[1]].append(after[r].get(("first", k[1], k[2]), math.inf))
    if not found:
        return None
    op = min(found, key=lambda o: (_med(first[o]), -len(found[o])))
    return {"op": op, "ranks": sorted(found[op]), "units": _units(before, after, found[op], op)}


def _units(before, after, ranks, op) -> dict[str, Any]:
    """Which calls (units, in issue order) of `op` grew: all, or their indices."""
    n = max((k[3] + 1 for r in ranks for k in after[r] if k[:3] == ("unit", op, "backward")), default=0)
    growth = [
        _med(
            after[r].get(("unit", op, "backward", i), 0.0) - before[r].get(("unit", op, "backward", i), 0.0)
            for r in ranks
        )
        for i in range(n)
    ]
    top = max(growth, default=0.0)
    hot = [i for i, g in enumerate(growth) if top > 0 and g >= 0.5 * top]
    return {"calls_per_step": n, "grew": "every call" if len(hot) == n else hot}


def analyze_forensics(records: list[dict[str, Any]], meta: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The forensic verdict from a run's capture records (None when nothing was captured)."""
    wins = _windows(records)
    if not wins:
        return None
    before, after = wins.get("baseline", {}), wins.get("collapse", {})
    steps = {w: sorted({int(r["step"]) for r in records if r.get("window") == w}) for w in wins}
    out: dict[str, Any] = {"windows": {w: [s[0], s[-1], len(s)] for w, s in steps.items()}}
    if not after:
        return out | {"kind": None, "message": "forensics: only the healthy baseline was captured (no collapse seen)"}
    ranks = sorted(set(before) & set(after))
    if not ranks:
        msg = "forensics: the collapse was captured but no baseline to compare with (it started too early)"
        return out | {
            "kind": "unexplained",
            "grew": [],
            "table": [],
            "message": msg,
            "experiment": EXPERIMENTS["unexplained"],
        }
    table, grew = _table(before, after, ranks)
    shares = _shares(before, after, ranks)
    out |= {"table": table, "grew": grew, "shares": shares, "ranks": ranks}
    return out | _classify(before, after, ranks, grew, shares, meta)


def _classify(before, after, ranks, grew, shares, meta) -> dict[str, Any]:
    coll, cpu, gc = (shares.get(k) or 0.0 for k in ("collective", "cpu", "gc"))
    dw = shares.get("backward_growth_s")
    if _allocator_grew(grew, after):
        return {
            "kind": "allocator",
            "message": "allocator-bound: the caching allocator retried (or grew its reserve) in step with the backward",
            "experiment": EXPERIMENTS["allocator"],
        }
    if gc >= GC_SHARE:
        return {
            "kind": "host",
            "cause": "gc",
            "message": f"host-bound (garbage collection): GC pauses in backward grew by {gc:.0%} of the "
            f"backward's growth (+{_ms(dw)} per step)",
            "experiment": EXPERIMENTS["host_gc"],
        }
    if cpu >= CPU_SHARE and (shares.get("cpu_alone") or 0.0) >= MIN_CPU_ALONE and coll <= 0.5:
        return {
            "kind": "host",
            "cause": "cpu",
            "message": f"host-bound: the backward's host time grew with its wall time (CPU time plus "
            f"waiting for a core explain {cpu:.0%} of the +{_ms(dw)} per step, CPU time alone "
            f"{shares.get('cpu_alone'):.0%}; the collectives {coll:.0%})",
            "experiment": EXPERIMENTS["host_cpu"],
        }
    cause = _cause_op(before, after, ranks) if coll >= COLLECTIVE_SHARE else None
    if cause is not None:
        where = _group_name(cause["ranks"], ranks, meta)
        exp = EXPERIMENTS["collective"].format(op=cause["op"])
        if "nodes" in where:
            exp = EXPERIMENTS["collective_group"].format(group=where["group"]) + "; " + exp
        units = cause["units"]["grew"]
        unit_words = "every call" if units == "every call" else "calls " + ", ".join(map(str, units))
        return {
            "kind": "collective",
            "op": cause["op"],
            "phase": "backward",
            "where": where,
            "units": cause["units"],
            "message": f"collective-bound: {cause['op']} in backward grew on {where['group']} ({unit_words} of "
            f"{cause['units']['calls_per_step']} per step); the collectives explain {coll:.0%} of the "
            f"backward's +{_ms(dw)} per step",
            "experiment": exp,
        }
    return {
        "kind": "unexplained",
        "message": f"unexplained: of the backward's +{_ms(dw)} per step the collectives explain {coll:.0%}, "
        f"host CPU {cpu:.0%}, GC {gc:.0%}",
        "experiment": EXPERIMENTS["unexplained"],
    }


def _ms(x: float | None) -> str:
    return "?" if x is None else (f"{x:.2f} s" if x >= 1 else f"{x * 1000:.0f} ms")
