"""Property-based fuzz of every input edge (issue 38 item 6): framework configs (torchtitan TOML,
DeepSpeed JSON, Accelerate YAML, HF TrainingArguments JSON), platform files, HF config.json
models and the log readers (StepMonitor rank files, PRISM perf.jsonl and [TIMING] logs,
torchtitan logs, nccl-tests and oneCCL benchmark outputs).

Each case starts from a real file (tests/fixtures/configs, tests/fixtures/hf, the shipped platform
presets, the log fixtures; their sources are beside them) and replaces values with hostile ones
(NaN, inf, 1e308, 10**400, bools, strings, lists, tables, nesting 30-1,200 deep, YAML alias bombs,
cut and garbled log lines). The invariant: the edge returns its result or raises SpecError with a
one-line message (the CLI's exit 2); any other exception is a traceback, counted and shown.

The same cases run bounded in the test suite (tests/unit/inputs/test_config_fuzz.py,
tests/unit/specs/test_spec_file_fuzz.py, tests/cli/test_log_fuzz_cli.py: a few dozen each,
derandomized) and here at length:

    PYTHONPATH=src python benchmarks/fuzz_inputs.py [--cases 10000] [--only deepspeed]

Prints per edge: cases, accepted, refused (SpecError), tracebacks, the slowest case (s); exit 1 on
any traceback. Measured 2026-12-06 (branch edges, 2 shared CPU cores): 10,008 cases (834 per
edge), 0 tracebacks, 53 s, 108 MB peak RSS, slowest case 0.47 s (an Accelerate YAML). Earlier
runs found, and the branch fixed: int(nan) on a StepMonitor record's samples, a 400-digit size in
nccl-tests output, PyYAML's quadratic scan of 1,200-level flow nesting (2-36 s a case).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomllib
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism_strategy.specs.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
PRESETS = ROOT / "src" / "prism_strategy" / "data" / "platforms"

HOSTILE: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    1e308,
    -1e308,
    1.5e300,
    10**400,
    2**63,
    2**40,
    -1,
    0,
    1,
    0.5,
    5e-324,
    True,
    False,
    "",
    "8",
    "auto",
    "nan",
    "x" * 300,
    None,
    "$(id)",
    "a\nb",
    [],
    {},
    [1, 2],
    {"enabled": True},
]
DEEP = "__fuzz_deep__"
"""A string the writers replace with [[[...]]] nested n deep (json.dumps cannot write that deep)."""
TEXT = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=12)
PLAUSIBLE = st.one_of(
    st.integers(0, 64),
    st.floats(0.0, 1e4),
    st.sampled_from(["bf16", "fp16", "no", "auto", "FULL_SHARD", "cpu", "none", True, False, 1, 2, 3, 8]),
)
"""Values a real file could hold: they keep a case past the first check to the code behind it."""
LEAF = st.one_of(
    PLAUSIBLE,
    PLAUSIBLE,
    PLAUSIBLE,
    st.sampled_from(HOSTILE),
    st.integers(),
    st.floats(),
    TEXT,
    st.integers(30, 1200).map(lambda n: f"{DEEP}{n}"),
)
VALUE = st.recursive(
    LEAF, lambda ch: st.lists(ch, max_size=3) | st.dictionaries(TEXT.filter(bool), ch, max_size=3), max_leaves=6
)


def paths(d: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path of nested tables (tables themselves included: replacing one tests `fsdp: 1`)."""
    out: list[tuple] = []
    if isinstance(d, dict):
        for k, v in d.items():
            out += [(*prefix, k), *paths(v, (*prefix, k))]
    return out


@st.composite
def mutated(draw: Callable, seed: dict[str, Any]) -> dict[str, Any]:
    """`seed` with 1-3 of its values (or tables) replaced, and maybe a key added."""
    d = copy.deepcopy(seed)
    every = paths(d)
    for path in draw(st.lists(st.sampled_from(every), min_size=1, max_size=3)):
        node = d
        for k in path[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node[path[-1]] = draw(VALUE)
    if draw(st.booleans()):
        d[draw(TEXT.filter(bool))] = draw(VALUE)
    return d


def _deep(text: str) -> str:
    return re.sub(rf'["\']?{DEEP}(\d+)["\']?', lambda m: "[" * int(m[1]) + "]" * int(m[1]), text)


def to_json(d: Any) -> str:
    return _deep(json.dumps(d, ensure_ascii=True))


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items() if x is not None) + "}"
    return json.dumps(str(v), ensure_ascii=True)


def to_toml(d: dict[str, Any], prefix: str = "") -> str:
    """A TOML writer for fuzz data: scalars and arrays first, then each table (None is left out)."""
    head = [f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in d.items() if not isinstance(v, dict | type(None))]
    out = "\n".join(head) + "\n"
    for k, v in d.items():
        if isinstance(v, dict):
            name = f"{prefix}.{json.dumps(str(k))}" if prefix else json.dumps(str(k))
            out += f"[{name}]\n" + to_toml(v, name)
    return _deep(out)


BOMB_LEVELS = st.integers(0, 9)


def to_yaml(d: Any, bomb: int = 0) -> str:
    """YAML block style; `bomb` levels of 9-fold aliases prepended (the 681-byte bomb has 9)."""
    text = yaml.safe_dump(d, sort_keys=False, allow_unicode=False)
    lines = [f"l0: &l0 [{', '.join(['lol'] * 9)}]"] if bomb else []
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, bomb)]
    return "\n".join(lines) + ("\n" if lines else "") + _deep(text)


def _seed_file(path: Path) -> dict[str, Any]:
    text = path.read_text()
    if path.suffix == ".toml":
        return tomllib.loads(text)
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


CONFIG_SEEDS = {
    "torchtitan": ["torchtitan_llama3_8b.toml", "torchtitan_llama3_70b.toml"],
    "deepspeed": ["deepspeed_zero3_bf16.json", "accelerate_zero_stage3_offload_config.json"],
    "accelerate": ["accelerate_fsdp.yaml", "accelerate_deepspeed.yaml", "accelerate_multi_gpu.yaml"],
    "hf-trainer": ["hf_training_args_fsdp.json"],
}


def config_case(fmt: str) -> st.SearchStrategy[tuple[str, str]]:
    """(file name, text) of a mutated real config of one framework."""
    seeds = [(n, _seed_file(FIX / "configs" / n)) for n in CONFIG_SEEDS[fmt]]

    @st.composite
    def case(draw: Callable) -> tuple[str, str]:
        name, seed = draw(st.sampled_from(seeds))
        d = draw(mutated(seed))
        if name.endswith(".toml"):
            return name, to_toml(d)
        return (name, to_yaml(d, draw(BOMB_LEVELS))) if name.endswith(".yaml") else (name, to_json(d))

    return case()


def check_config(path: Path) -> str:
    """read_config, then the scenario its keywords build."""
    from prism_strategy.flags import flag_groups, scenario_from_flags
    from prism_strategy.inputs.frameworks import read_config

    cfg = read_config(path)
    options = {"model", *flag_groups()["options"]}
    scenario_from_flags("qwen3-0.6b", **{k: v for k, v in cfg.options.items() if k not in options})
    return "accepted"


def platform_case() -> st.SearchStrategy[tuple[str, str]]:
    seeds = [_seed_file(p) for p in sorted(PRESETS.glob("*.toml"))[:6]]
    return st.tuples(st.just("platform.toml"), st.sampled_from(seeds).flatmap(mutated).map(to_toml))


def check_platform(path: Path) -> str:
    from prism_strategy.flags import scenario_from_flags
    from prism_strategy.specs.presets import load_platform

    scenario_from_flags("qwen3-0.6b", platform=load_platform(str(path)))
    return "accepted"


def model_case() -> st.SearchStrategy[tuple[str, str]]:
    seeds = [_seed_file(p) for p in sorted((FIX / "hf").glob("*/config.json"))]
    return st.tuples(st.just("config.json"), st.sampled_from(seeds).flatmap(mutated).map(to_json))


def check_model(path: Path) -> str:
    from prism_strategy.specs.hf import load_hf_config

    load_hf_config(path)
    return "accepted"


LOG_SEEDS = {
    "monitor": (FIX / "imports" / "monitor" / "good" / "rank0.jsonl", "run/rank0.jsonl"),
    "prism-perf": (FIX / "logs" / "prism_healthy" / "perf.jsonl", "perf.jsonl"),
    "prism": (FIX / "imports" / "prism" / "train.log", "train.log"),
    "torchtitan": (FIX / "imports" / "torchtitan" / "train.log", "train.log"),
    "nccl-tests": (FIX / "imports" / "all_reduce_perf_2x8_h100.out", "all_reduce.out"),
    "oneccl": (FIX / "imports" / "oneccl_allreduce_2x12_aurora.log", "oneccl.log"),
}
NUMBER = re.compile(r"\d+(\.\d+)?")
BAD_NUMBERS = ["nan", "inf", "-1", "0", "1e999", "9" * 400, "1e-400", "x", "", "-0.0", "1,2"]


@st.composite
def garbled_lines(draw: Callable, lines: list[str]) -> str:
    """The log with a few lines garbled: numbers replaced, lines cut, doubled or swapped for junk."""
    out = list(lines)
    for _ in range(draw(st.integers(1, 5))):
        i = draw(st.integers(0, len(out) - 1))
        how = draw(st.sampled_from(["number", "number", "cut", "dup", "junk", "json"]))
        line = out[i]
        if how == "number":
            nums = list(NUMBER.finditer(line))
            if nums:
                m = draw(st.sampled_from(nums))
                line = line[: m.start()] + draw(st.sampled_from(BAD_NUMBERS)) + line[m.end() :]
        elif how == "cut":
            line = line[: draw(st.integers(0, max(0, len(line) - 1)))]
        elif how == "dup":
            out.insert(i, line)
        elif how == "junk":
            line = draw(TEXT)
        elif line.startswith("{"):
            try:
                line = to_json(draw(mutated(json.loads(line))))
            except (ValueError, TypeError, RecursionError):  # a line made deep by an earlier draw
                pass
        out[i] = line
    return "\n".join(out) + draw(st.sampled_from(["\n", ""]))


def log_case(kind: str) -> st.SearchStrategy[tuple[str, str]]:
    seed, name = LOG_SEEDS[kind]
    lines = seed.read_text().splitlines()[:60]
    return st.tuples(st.just(name), garbled_lines(lines))


def check_log(path: Path) -> str:
    """Training logs: `results import`'s read (read_run) and `analyze`'s read and verdict, refused
    only if both refuse; benchmark outputs: the collective reader."""
    from prism_strategy.diagnose.analyze import analyze
    from prism_strategy.readers import COLLECTIVE_FORMATS, collective_format, read_run

    if path.suffix in (".out", ".log") and (fmt := collective_format(path)):
        COLLECTIVE_FORMATS[fmt].read(path)
        return "accepted"
    target = path.parent if path.name.startswith("rank") else path
    try:
        read_run(target)
        imported = True
    except SpecError:
        imported = False
    try:
        analyze([target])
    except SpecError:
        if not imported:
            raise
    return "accepted"


EDGES: dict[str, tuple[Callable[[], st.SearchStrategy[tuple[str, str]]], Callable[[Path], str]]] = {
    **{f"config-{f}": (lambda f=f: config_case(f), check_config) for f in CONFIG_SEEDS},
    "platform": (platform_case, check_platform),
    "model": (model_case, check_model),
    **{f"log-{k}": (lambda k=k: log_case(k), check_log) for k in LOG_SEEDS},
}

_COUNTER = itertools.count()


def run_case(edge: str, tmp: Path, name: str, text: str) -> str:
    """Write the case under a fresh folder (the loaders cache by path) and run the edge: its result
    ("accepted") or "refused" for a SpecError (the CLI's exit 2, printed on one line with newlines
    escaped); anything else propagates."""
    path = tmp / f"c{next(_COUNTER)}" / name
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        return EDGES[edge][1](path)
    except SpecError as e:
        if not str(e).strip():  # the CLI prints it as one line (newlines escaped): it must say something
            raise AssertionError("SpecError without a message") from e
        return "refused"


def fuzz(edge: str, tmp: Path, cases: int, tally: Counter | None = None, **more: Any) -> None:
    """Run `cases` derandomized hypothesis cases of one edge. With `tally`, outcomes are counted
    (tracebacks included, with the first of each kind kept) instead of failing the first one."""

    @settings(
        max_examples=cases,
        derandomize=True,
        database=None,
        deadline=more.get("deadline"),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(EDGES[edge][0]())
    def one(case: tuple[str, str]) -> None:
        t = time.perf_counter()
        if tally is None:
            run_case(edge, tmp, *case)
            return
        try:
            tally[run_case(edge, tmp, *case)] += 1
        except Exception as e:  # what the fuzz hunts: any exception that is not one line of SpecError
            key = f"traceback {type(e).__name__}: {str(e)[:100]}"
            tally[key] += 1
            tally.setdefault("example " + key, case[1][:300])  # type: ignore[arg-type]
        tally["slowest_ms"] = max(tally["slowest_ms"], int(1000 * (time.perf_counter() - t)))

    one()


def check_edge(edge: str, tmp: Path, cases: int, deadline: Any = None) -> Counter:
    """The suite's form: `cases` cases of one edge, failing on any traceback (its input shown), and
    on a fuzz that never gets a case past the checks (nothing accepted: it would test only them)."""
    tally: Counter = Counter()
    fuzz(edge, tmp, cases, tally, deadline=deadline)
    bad = {k: tally["example " + k] for k in tally if k.startswith("traceback")}
    assert not bad, f"{edge}: {bad}"
    assert tally["accepted"] > 0 and tally["refused"] > 0, f"{edge}: {dict(tally)}"
    return tally


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000, help="total cases (at least), split evenly over the edges")
    ap.add_argument("--only", default=None, help="one edge: " + ", ".join(EDGES))
    args = ap.parse_args()
    edges = [args.only] if args.only else list(EDGES)
    per = max(1, -(-args.cases // len(edges)))  # at least --cases in all
    bad = 0
    print(f"{'edge':18s} {'cases':>6s} {'accepted':>9s} {'refused':>8s} {'tracebacks':>10s} {'slowest s':>10s}")
    with tempfile.TemporaryDirectory() as d:
        for edge in edges:
            tally: Counter = Counter()
            fuzz(edge, Path(d), per, tally)
            tb = sum(v for k, v in tally.items() if k.startswith("traceback"))
            n = tally["accepted"] + tally["refused"] + tb
            bad += tb
            print(
                f"{edge:18s} {n:6d} {tally['accepted']:9d} {tally['refused']:8d} {tb:10d} {tally['slowest_ms'] / 1000:10.2f}"
            )
            for k, v in tally.items():
                if k.startswith("traceback"):
                    print(f"    {v} x {k}\n      e.g. {tally['example ' + k]!r}"[:600])
            sys.stdout.flush()
    print(f"tracebacks: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
