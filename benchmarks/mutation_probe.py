"""Mutation probe (issue 29 item 8): does the suite notice when the model goes wrong, and does a
test judged by a measurement the fit did not see notice it?

Each named mutation is a few small text patches, each found by an anchor (a regular expression that
must match exactly once: the probe stops with exit 2 naming the file and anchor when one does not,
since the code it patches moves). Each is applied to a scratch copy of the working tree (src/,
tests/, benchmarks/, pyproject.toml in a temporary folder; the working tree is never touched), and
the test files mapped to it run there with PYTHONPATH on the copy. A small pytest plugin records
every failed test (a strict xfail that starts passing counts) and whether it carries the
`out_of_sample` marker (pyproject: judged by a measurement its fit did not see). A baseline run of
the same files on the unmutated copy comes first, so a failure is the mutation's.

Run: PYTHONPATH=src python benchmarks/mutation_probe.py [--only NAME ...] [--list | --check-anchors]
--check-anchors applies every patch in memory and checks each mutation's test files exist (about a
second; the full probe takes 13+ minutes): run it after a change to the code the anchors name.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("src", "tests", "benchmarks", "pyproject.toml")
PLATFORMS = "src/prism_strategy/data/platforms"
NUMBER = r"([0-9]+(?:\.[0-9]+)?)"


@dataclass(frozen=True)
class Patch:
    path: str
    anchor: str
    """A regular expression (re.MULTILINE) that must match exactly once."""
    replace: str
    """The replacement (re.sub syntax: \\1 is the anchor's first group), or "x<factor>" to scale
    the number the anchor's one group captures."""


@dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    patches: tuple[Patch, ...]
    tests: tuple[str, ...]


U = "tests/unit/"
AURORA_FIT_TESTS = (
    U + "planning/test_planner_decisions.py",
    U + "bench/test_out_of_sample.py",
    U + "bench/test_aurora_fit_holdout.py",
    U + "estimate/test_host_terms.py",
)
MUTATIONS = (
    # Since the collective fit (issue 25) a rank's scale-out rate is min(NIC share, the fitted
    # scaleout_rank_bw_gbps) (estimate/comm_oneccl_phases.py): with 12 groups on 8 NICs the share is
    # 13.3 GB/s, above the fitted 5.8, so nic_bw_gbps x0.5 is an equivalent mutant (0 tests failed on
    # the merged code); the cross-node term the model uses is the fitted injection.
    Mutation(
        "aurora-scaleout-half",
        "aurora's fitted per-rank scale-out injection (scaleout_rank_bw_gbps) x0.5",
        (Patch(f"{PLATFORMS}/aurora.toml", rf"^scaleout_rank_bw_gbps = {NUMBER}$", "x0.5"),),
        AURORA_FIT_TESTS + (U + "estimate/test_comm_models.py", U + "bench/test_collective_fit.py"),
    ),
    Mutation(
        "dgx-h100-nic-half",
        "dgx-h100's NIC bandwidth x0.5",
        (Patch(f"{PLATFORMS}/dgx-h100.toml", rf"^nic_bw_gbps = {NUMBER}$", "x0.5"),),
        (
            U + "estimate/test_nccl_presets_measured.py",
            U + "estimate/test_comm_models.py",
            U + "estimate/test_overlap.py",
        ),
    ),
    Mutation(
        "loo-holds-nothing",
        "leave-one-out refits on every record, the held-out one included (both fits)",
        (
            Patch(
                "src/prism_strategy/bench/fit/fit_terms.py",
                r"rest = \[o for o in obs if o\.id != rid\]",
                "rest = list(obs)",
            ),
            Patch(
                "src/prism_strategy/bench/fit/cuda_fit.py",
                r"rest = \[x for x in obs if x\.id != o\.id\]",
                "rest = list(obs)",
            ),
        ),
        (
            U + "bench/test_loo_poison.py",
            U + "bench/test_aurora_fit_holdout.py",
            U + "bench/test_cuda_fit.py",
            U + "estimate/test_host_terms.py",
        ),
    ),
    Mutation(
        "nccl-schedule-hidden",
        "every overlappable NCCL collective hidden behind compute (estimate/overlap.py)",
        (
            Patch(
                "src/prism_strategy/estimate/overlap.py",
                r"return Exposed\(seconds=fixed \+ max\(0\.0, total\), fixed_s=fixed\)",
                "return Exposed(seconds=fixed, fixed_s=fixed)",
            ),
        ),
        (U + "bench/test_cuda_fit.py", U + "estimate/test_overlap.py", U + "estimate/test_nccl_presets_measured.py"),
    ),
    Mutation(
        "loss-fp32-8-bytes",
        "the upcast loss holds 8 bytes per logit instead of 12",
        (Patch("src/prism_strategy/estimate/memory.py", r"^CE_BYTES = 3 \* FP32", "CE_BYTES = 2 * FP32"),),
        (
            U + "estimate/test_published_memory.py",
            U + "planning/test_planner_decisions.py",
            U + "estimate/test_memory_runtime.py",
        ),
    ),
    Mutation(
        "attention-flops-half",
        "attention FLOPs halved (estimate/compute.py)",
        (
            Patch(
                "src/prism_strategy/estimate/compute.py",
                r"block_attn = 4\.0 \* t \* t \* spec\.q_width \* causal",
                "block_attn = 2.0 * t * t * spec.q_width * causal",
            ),
        ),
        (U + "bench/test_cuda_fit.py", U + "bench/test_out_of_sample.py", U + "planning/test_planner_decisions.py"),
    ),
    Mutation(
        "aurora-intra-bw-x2",
        "aurora's intra-node host-staged ring bandwidth (collective fit; host ring prior) x2",
        (Patch(f"{PLATFORMS}/aurora.toml", rf"^intra_ring_bw_gbps = {NUMBER}$", "x2"),),
        AURORA_FIT_TESTS + (U + "specs/test_preset_provenance.py", U + "bench/test_collective_fit.py"),
    ),
    Mutation(
        "aurora-host-blocking-off",
        "aurora's collectives no longer hold the host (CCL_OP_SYNC=1 ignored): they overlap compute",
        (
            Patch(
                f"{PLATFORMS}/aurora.toml", r"^host_blocking_collectives = true$", "host_blocking_collectives = false"
            ),
            # the flag alone is an equivalent mutant: aurora's comm_overlap = 0 (set because the host
            # blocks) already exposes every collective (CommEstimate.exposed_s), so let them overlap
            Patch(f"{PLATFORMS}/aurora.toml", r"^comm_overlap = 0\.0$", "comm_overlap = 1.0"),
        ),
        AURORA_FIT_TESTS + (U + "estimate/test_oneccl_routing.py",),
    ),
    Mutation(
        "zero3-rs-as-all-reduce",
        "ZeRO-3's gradient reduce-scatter priced as an all-reduce (engines/deepspeed.py)",
        (
            Patch(
                "src/prism_strategy/engines/deepspeed.py",
                r'add\(\n(\s+)"reduce_scatter",\n(\s+)cd,\n(\s+)padded \* grad_accum,',
                'add(\n\\1"all_reduce",\n\\2cd,\n\\3padded * grad_accum,',
            ),
        ),
        (
            U + "planning/test_planner_decisions.py",
            U + "engines/test_engines.py",
            U + "planning/test_engine_decisions.py",
        ),
    ),
)

PLUGIN = """
import json, os
def pytest_runtest_logreport(report):
    if report.failed:
        with open(os.environ["PROBE_OUT"], "a") as f:
            f.write(json.dumps({"id": report.nodeid, "oos": "out_of_sample" in report.keywords}) + "\\n")
"""


class AnchorError(Exception):
    pass


def apply(root: Path, patch: Patch) -> None:
    path = root / patch.path
    path.write_text(patched(path.read_text(), patch))


def patched(text: str, patch: Patch) -> str:
    found = list(re.finditer(patch.anchor, text, re.MULTILINE))
    if len(found) != 1:
        raise AnchorError(f"{patch.path}: anchor {patch.anchor!r} matched {len(found)} times, not once")
    m = found[0]
    if patch.replace.startswith("x"):
        value = float(m.group(1)) * float(patch.replace[1:])
        new = text[: m.start(1)] + f"{value:g}" + text[m.end(1) :]
    else:
        new = text[: m.start()] + m.expand(patch.replace) + text[m.end() :]
    if new == text:
        raise AnchorError(f"{patch.path}: anchor {patch.anchor!r} matched but the patch changes nothing")
    return new


def check_anchors(m: Mutation, root: Path = ROOT) -> None:
    """Apply the mutation's patches in memory, in order, as probe() would; AnchorError if one fails."""
    texts: dict[str, str] = {}
    for p in m.patches:
        texts[p.path] = patched(texts.get(p.path) or (root / p.path).read_text(), p)
    missing = [t for t in m.tests if not (root / t).is_file()]
    if missing:
        raise AnchorError(f"test file {missing[0]} does not exist")


def scratch_copy(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.db", ".pytest_cache")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    (dest / "_probe_plugin.py").write_text(PLUGIN)


def run_tests(root: Path, tests: tuple[str, ...]) -> list[dict]:
    out = root / "failed.jsonl"
    out.unlink(missing_ok=True)
    env = os.environ | {"PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}", "PROBE_OUT": str(out)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_probe_plugin", *tests]
    subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def probe(m: Mutation) -> tuple[list[dict], list[dict]]:
    """(failures on the unmutated copy, failures on the mutated copy) of the mutation's tests."""
    with tempfile.TemporaryDirectory(prefix="prism-mutation-") as tmp:
        root = Path(tmp)
        scratch_copy(root)
        baseline = run_tests(root, m.tests)
        for p in m.patches:
            apply(root, p)
        return baseline, run_tests(root, m.tests)


def report(m: Mutation, baseline: list[dict], failed: list[dict]) -> list[str]:
    base = {f["id"] for f in baseline}
    new = [f for f in failed if f["id"] not in base]
    oos = [f for f in new if f["oos"]]
    caught = "yes" if oos else ("other tests only" if new else "NOT CAUGHT")
    lines = [f"{m.name:<26} {len(new):>6} {len(oos):>14}  {caught}"]
    lines += [f"    {'[oos] ' if f['oos'] else '      '}{f['id'][:88]}" for f in new[:8]]
    if len(new) > 8:
        lines.append(f"    ... and {len(new) - 8} more")
    if base:
        lines.append(f"    (baseline: {len(base)} already failing, not counted)")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="mutation names to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutations and their tests, run nothing")
    ap.add_argument("--check-anchors", action="store_true", help="check every patch applies, run no test")
    args = ap.parse_args(argv)
    names = {m.name for m in MUTATIONS}
    unknown = sorted(set(args.only or ()) - names)
    if unknown:
        print(f"error: unknown mutation {unknown[0]!r}; known: {', '.join(sorted(names))}", file=sys.stderr)
        return 2
    chosen = [m for m in MUTATIONS if args.only is None or m.name in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.what}\n    tests: {' '.join(t.removeprefix(U) for t in m.tests)}")
        return 0
    if args.check_anchors:
        try:
            for m in chosen:
                check_anchors(m)
        except AnchorError as e:
            print(f"error: mutation {m.name}: {e}; update its anchor in benchmarks/mutation_probe.py", file=sys.stderr)
            return 2
        print(f"{len(chosen)} mutations: every anchor matches once and its patch applies")
        return 0
    print(f"{'mutation':<26} {'failed':>6} {'out-of-sample':>14}  caught by an out-of-sample test")
    missed = 0
    for m in chosen:
        try:
            baseline, failed = probe(m)
        except AnchorError as e:
            print(f"error: mutation {m.name}: {e}; update its anchor in benchmarks/mutation_probe.py", file=sys.stderr)
            return 2
        lines = report(m, baseline, failed)
        missed += "yes" not in lines[0]
        print("\n".join(lines), flush=True)
    print(f"\n{len(chosen) - missed} of {len(chosen)} mutations caught by an out-of-sample, measurement-based test")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
