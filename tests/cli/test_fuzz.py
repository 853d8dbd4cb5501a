"""Fuzz: over 1,000 generated bad command lines, run in-process with typer's CliRunner.

Seeded and deterministic. Commands: plan, estimate, emit, doctor, analyze, results, compare,
calibrate and report (never bench, ceiling, tune or census: they launch torchrun; never
``doctor --clean``). Each case starts from a valid command line and replaces one to three of its
values with bad numbers (negative, zero, huge, NaN, non-numeric), names (unknown, 500
characters, unicode, path separators), paths (missing, a folder where a file is expected, a
binary file, a file where a folder is expected), malformed JSON / TOML / JSONL files, or hostile
strings (quotes, ``$(...)``, newlines). Every case must end cleanly: exit 0, 1 or 2, no
exception out of the command, no traceback, and for exit 2 one ``error:`` line on stderr.
`estimate` only ever gets values that must fail (a valid one traces a model: seconds).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import typer
import typer.testing
from typer.testing import CliRunner

from prism_strategy.cli import app

SEED = 20261130
CASES = {
    "plan": 170,
    "estimate": 110,
    "emit": 130,
    "doctor": 130,
    "analyze": 150,
    "results": 90,
    "compare": 80,
    "calibrate": 80,
    "report": 70,
}
assert sum(CASES.values()) >= 1000

BAD_NUMBERS = [
    "0",
    "-1",
    "-0",
    "1e309",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "abc",
    "",
    "1.5",
    "99999999999999999999",
    "2147483648",
    "1_000",
    " 3",
    "0x10",
    "1e3",
    "--",
    "٣",
]
HOSTILE = [
    "$(touch pwned)",
    "`id`",
    "'; echo hi #",
    '"quoted"',
    "a\nb",
    "line\r\nbreak",
    "x" * 500,
    "ünïcødé-模型",
    "../../etc/passwd",
    "a/b",
    "/",
    ".",
    "..",
    "-",
    " ",
    "*",
    "%s%n",
    "{x}",
    "\\",
    "con",
]


def _write_inputs(d: Path) -> dict[str, str]:
    """Files every pool draws from; names -> paths (as strings)."""
    d.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}

    def put(name: str, content: str | bytes) -> str:
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        files[name] = str(p)
        return str(p)

    rng = random.Random(SEED)
    put("binary.bin", bytes(rng.randrange(256) for _ in range(4096)))
    put("empty.txt", "")
    put("text.txt", "hello\n")
    put("bad.json", "{not json")
    put("list.json", "[1, 2, 3]")
    base = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 256,
        "max_position_embeddings": 128,
    }
    variants = {
        "heads0": {"num_attention_heads": 0},
        "hidden0": {"hidden_size": 0},
        "layers_neg": {"num_hidden_layers": -2},
        "kv0": {"num_key_value_heads": 0},
        "vocab_str": {"vocab_size": "many"},
        "nan": {"hidden_size": float("nan")},
        "huge": {"hidden_size": 10**30, "num_hidden_layers": 10**12},
        "heads_odd": {"num_attention_heads": 3},
        "inter0": {"intermediate_size": 0},
        "float": {"hidden_size": 64.5},
        "bool": {"num_hidden_layers": True},
        "null": {"hidden_size": None},
        "nested": {"text_config": {"hidden_size": 0}},
    }
    for name, change in variants.items():
        put(f"cfg_{name}/config.json", json.dumps({**base, **change}))
    put("cfg_missing/config.json", json.dumps({"model_type": "llama"}))
    families = {
        "moe_k_over": {"model_type": "mixtral", "num_local_experts": 2, "num_experts_per_tok": 3},
        "moe_step0": {"model_type": "qwen2_moe", "decoder_sparse_step": 0},
        "moe_only_str": {"model_type": "qwen3_moe", "mlp_only_layers": "all"},
        "moe_all_dense": {"model_type": "qwen2_moe", "mlp_only_layers": [0, 1]},
        "moe_neg": {"model_type": "olmoe", "num_experts": -1},
        "gpt2_cross": {"model_type": "gpt2", "add_cross_attention": True},
        "gemma_pattern0": {"model_type": "gemma2", "sliding_window_pattern": 0, "sliding_window": "wide"},
        "gemma3_wrapped": {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "head_dim": 0}},
        "clip_list": {"model_type": "clip_vision_model", "image_size": [336, 336]},
        "clip_tiny": {"model_type": "clip", "vision_config": {"image_size": 4, "patch_size": 14}},
        "unknown": {"model_type": "mamba"},
        "no_type": {"model_type": None},
    }
    for name, change in families.items():
        put(f"cfg_{name}/config.json", json.dumps({**base, **change}))
    # issue 38's hostile files: non-finite and huge numbers, wrong nested types, deep nesting, an
    # alias bomb; they join the path pools, and `plan --from` draws from them
    put("ds_nan.json", '{"zero_optimization": {"stage": NaN}, "train_micro_batch_size_per_gpu": Infinity}')
    put("ds_huge.json", '{"zero_optimization": {"stage": 1}, "train_batch_size": 1' + "0" * 400 + "}")
    put("ds_nested.json", '{"zero_optimization": 3, "bf16": 1}')
    put("deep.json", '{"zero_optimization": {"stage": 1}, "x": ' + "[" * 975 + "]" * 975 + "}")
    put("acc_fsdp1.yaml", "distributed_type: FSDP\nfsdp_config: 1\nnum_processes: .inf\n")
    put(
        "acc_bomb.yaml",
        "".join(
            [f"a: &a [{', '.join(['lol'] * 9)}]\n"]
            + [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi")]
        )
        + "distributed_type: MULTI_GPU\n",
    )
    put("tt_inf.toml", "[model]\nname = 'llama3'\nflavor = '8B'\n[training]\nseq_len = inf\nlocal_batch_size = nan\n")
    put(
        "plat_inf.toml",
        'name = "p"\nbase = "aurora"\n[hardware]\nmemory_gib = inf\n[links]\nintra_latency_us = 1e308\n',
    )
    put("plat_types.toml", 'name = "p"\nbase = "aurora"\nsources = ["a"]\n[hardware]\ndevices_per_node = true\n')
    put("plat_deep.toml", 'name = "p"\nx = ' + "[" * 2994 + "]" * 2994 + "\n")
    put("mt_list/config.json", json.dumps({**base, "model_type": ["llama"]}))
    for fifo in ("fifo.toml", "fifo.json"):  # a FIFO without a writer: opening it must not block
        os.mkfifo(d / fifo)
        files[fifo] = str(d / fifo)
    put("bad.toml", "[[[ not toml")
    put("types.toml", 'name = 1\ndevices_per_node = "many"\npeak_tflops = -5\n')
    put("empty.toml", "")
    put("huge.toml", "name = 'x'\ndevices_per_node = 99999999999999999999999\n")
    put(
        "launch.sh",
        "#!/bin/bash\nmpiexec -n $(( 1/0 )) --cpu-bind list:a:b python train.py '\"\n"
        + "export CCL_X=\x00\x01\n"
        + "module load frameworks\n" * 3
        + "#PBS -l select=-4\n",
    )
    put("launch_heredoc.sh", "mpiexec -n 12 -ppn 12 bash -lc '\nmodule load frameworks\npython3 - <<EOF\n    print()\n")
    put("launch_aurora.py", "#!/usr/bin/env python3\nimport subprocess\nprint('module load frameworks')\n")
    put("strategy.toml", "[strategy]\nname = 7\n[[[")
    put("ds_config.json", '{"zero_optimization": {"stage": "three"}, "train_batch_size": -1}')
    put("bad_syntax.py", "def f(:\n    torch.cuda.empty_cache(\n")
    put("train_ok.py", "import torch\nfor b in loader:\n    torch.cuda.empty_cache()\n")
    step = {"kind": "step", "step": 0, "rank": 0, "step_s": 1.0, "phases": {"forward": 0.5}}
    logs = {
        "a_str_step": {**step, "step": "x"},
        "a_phases_list": {**step, "phases": [1, 2]},
        "a_null_time": {**step, "step_s": None},
        "a_meta_rank": {"kind": "meta", "rank": "x"},
        "a_event": {"kind": "event", "event": 5, "ranks": "abc"},
        "a_huge": {**step, "step": 1e300, "rank": 1e300},
        "a_close": {"kind": "close", "steps": "many", "rank": [1]},
    }
    for name, rec in logs.items():
        put(f"{name}/rank0.jsonl", json.dumps(rec) + "\n")
    put("a_meta_only/rank0.jsonl", json.dumps({"kind": "meta", "rank": 0, "t0": 1.0}) + "\n")
    put("a_numbers/rank0.jsonl", "5\n")
    put(
        "a_perf_huge/perf.jsonl",
        "".join(
            json.dumps({"step": s, "rank": r, "fwd_time": 1e308 * (s + 1), "bwd_time": -1.0, "iter": 1e300}) + "\n"
            for s in range(12)
            for r in range(2)
        ),
    )
    put(
        "a_timing/train.log",
        "".join(
            f"[rank{r}]: [TIMING] step {s} | Fwd 1e999s | Bwd nan s | Total 0s\n" for s in range(12) for r in range(2)
        ),
    )
    put("a_hang_list/hang_report.json", "[1, 2]")
    put("a_hang_types/hang_report.json", json.dumps({"step": "x", "ranks_not_reached": [1], "ranks_reached": 5}))
    put("a_hang_bad/hang_report.json", "{")
    good = [json.dumps({"kind": "meta", "rank": r, "t0": 1.0, "host": "h", "cpus": 1}) for r in range(2)]
    for r in range(2):
        lines = [good[r]] + [
            json.dumps(
                {
                    "kind": "step",
                    "step": s,
                    "rank": r,
                    "step_s": 0.1 + 0.05 * r,
                    "phases": {"data": 0.01, "forward": 0.03 + 0.05 * r, "backward": 0.05, "optimizer": 0.01},
                }
            )
            for s in range(15)
        ]
        put(f"a_good/rank{r}.jsonl", "\n".join(lines) + "\n")
    files["a_good"] = str(d / "a_good")
    (d / "a_dir_empty").mkdir(exist_ok=True)
    files["a_dir_empty"] = str(d / "a_dir_empty")
    (d / "folder").mkdir(exist_ok=True)
    files["folder"] = str(d / "folder")
    files["missing"] = str(d / "does" / "not" / "exist")
    files["long_name"] = str(d / ("n" * 500))
    files["under_file"] = str(d / "text.txt" / "sub")
    files["unicode_dir"] = str(d / "ünï 模型 dir")
    return files


ESTIMATE_VALID = {
    "fp32",
    "projector",
    "tiny-llama",
    "qwen3-0.6b",
    "aurora",
    "cpu",
    "polaris",
    "siglip2-base-patch16-224",
}


def _must_fail_estimate(opt: str, value: str) -> bool:
    """Values estimate must refuse before it traces (a valid or huge count traces for seconds)."""
    if value in ESTIMATE_VALID:
        return False
    try:
        return int(value) < (0 if opt == "--ckpt-freq" else 1)
    except ValueError:
        return True


def _pools(f: dict[str, str], out: Path) -> dict[str, dict[str, list[str]]]:
    """Per command: option -> values it may be given (a few valid, mostly bad)."""
    cfgs = [v for k, v in f.items() if k.startswith("cfg_")] + [
        str(Path(v).parent) for k, v in f.items() if k.startswith("cfg_")
    ]
    paths = [
        f[k]
        for k in (
            "binary.bin",
            "empty.txt",
            "text.txt",
            "bad.json",
            "list.json",
            "bad.toml",
            "types.toml",
            "empty.toml",
            "huge.toml",
            "folder",
            "missing",
            "long_name",
            "under_file",
            "unicode_dir",
        )
    ]
    # issue 38's files go to plan alone (the other commands' draws stay as they were)
    hostile_configs = [
        f[k] for k in ("ds_nan.json", "ds_huge.json", "ds_nested.json", "acc_fsdp1.yaml", "tt_inf.toml", "deep.json")
    ] + [f["acc_bomb.yaml"], "/dev/zero", f["fifo.json"], f["fifo.toml"]]
    hostile_platforms = [f[k] for k in ("plat_inf.toml", "plat_types.toml", "plat_deep.toml", "fifo.toml")]
    logs = [v for k, v in f.items() if k.startswith("a_")] + [
        str(Path(v).parent) for k, v in f.items() if k.startswith("a_") and "/" in k
    ]
    names = HOSTILE + ["nope"]
    num = BAD_NUMBERS
    model = names + cfgs + paths + ["tiny-llama", "qwen3-0.6b"]
    platform = names + paths + ["aurora", "cpu", "polaris"]
    db = paths + [str(out / "fresh.db"), f["binary.bin"], f["text.txt"], f["folder"]]
    common_plan = {
        "--model": model,
        "--platform": platform,
        "--nodes": num + ["2"],
        "--seq-len": num + ["128"],
        "--micro-batch": num,
        "--ckpt-freq": num + ["1"],
        "--precision": names + ["fp32"],
        "--mode": names + ["projector"],
        "--vision": names + cfgs + paths + ["siglip2-base-patch16-224"],
        "--ranks-per-node": num,
    }
    return {
        "plan": {
            **common_plan,
            "--global-batch": num + ["7"],
            "--optimizer": names + ["sgd"],
            "--image-tokens": num,
            "--sweep-nodes": num + ["1,2,x", ",", "1,,2", "0,1", "-1", "1,2,4"],
            "--calibration": paths + names + ["none", "auto"],
            "--db": db,
            "--json": [],
            "--script": paths + [f["bad_syntax.py"], f["train_ok.py"]],
            "--from": paths + hostile_configs,
            "--platform": platform + hostile_platforms + ["/dev/zero"],
            "--model": model + [f["fifo.json"], f["mt_list/config.json"], "/dev/zero"],
        },
        "estimate": {
            k: [x for x in v if _must_fail_estimate(k, x)] for k, v in {**common_plan, "--strategy": names}.items()
        },
        "emit": {
            "--strategy": names + ["zero3", "fsdp_full_shard"],
            "--platform": platform,
            "--nodes": num + ["4", "600"],
            "--ranks-per-node": num + ["6", "13"],
            "--env-profile": names + paths + ["cpu-gloo"],
            "--precision": names,
            "--ckpt-freq": num,
            "--micro-batch": num,
            "--grad-accum": num,
            "--queue": HOSTILE + ["prod", "debug"],
            "--walltime": HOSTILE + num + ["25:00:00", "1:2", "99:99:99"],
            "--filesystems": HOSTILE,
            "--job-name": HOSTILE,
            "--script": HOSTILE + paths,
            "--account": HOSTILE,
            "--out": paths + [f["text.txt"], f["a_good"]],
            "--compile": [],
            "--force": [],
            "--static-graph": [],
            "--": HOSTILE,
        },
        "doctor": {
            "--launcher": paths
            + [f["launch.sh"], f["strategy.toml"], f["ds_config.json"], f["launch_heredoc.sh"], f["launch_aurora.py"]],
            "--module-show": paths + [f["launch.sh"]],
            "--script": paths + [f["bad_syntax.py"], f["train_ok.py"]],
            "--platform": platform,
            "--strategy": names + ["ddp"],
            "--nodes": num + ["3"],
            "--env-profile": names + paths,
            "--settle-s": num,
            "--json": [],
        },
        "analyze": {
            "PATH": logs + paths + HOSTILE,
            "--plot": paths + [str(out / "t.png"), f["binary.bin"]],
            "--json": [],
        },
        "results": {
            "--db": db,
            "--platform": names,
            "--export": names + ["csv", "json", "CSV"],
            "--out": paths,
            "--json": [],
            "--curves": [],
        },
        "compare": {"--db": db, "--calibration": paths + names + ["none"], "--json": []},
        "calibrate": {
            "--platform": platform,
            "--db": db,
            "--out": paths,
            "--fit": names + ["all", "steps", "comm"],
            "--json": [],
        },
        "report": {
            "--out": paths + [f["text.txt"], f["binary.bin"]],
            "--db": db,
            "--model": names + cfgs + paths,
            "--platform": names + paths,
        },
    }


def _base(cmd: str, out: Path, i: int, f: dict[str, str]) -> dict[str, str | None]:
    """A valid command line, as option -> value (None for a flag)."""
    return {
        "plan": {"--model": "tiny-llama", "--platform": "cpu"},
        "estimate": {"--model": "tiny-llama", "--platform": "cpu"},
        "emit": {"--strategy": "ddp", "--platform": "aurora", "--out": str(out / f"emit{i}")},
        "doctor": {"--no-live": None},
        "analyze": {"PATH": f["a_good"]},
        "results": {"--db": str(out / "fresh.db")},
        "compare": {"--db": str(out / "fresh.db")},
        "calibrate": {"--db": str(out / "fresh.db"), "--platform": "cpu"},
        "report": {"--db": str(out / "fresh.db"), "--out": str(out / f"report{i}")},
    }[cmd]


def generate(cmd: str, n: int, out: Path, f: dict[str, str]) -> list[list[str]]:
    rng = random.Random(f"{SEED}-{cmd}")
    pools = _pools(f, out)[cmd]
    cases = []
    for i in range(n):
        opts = dict(_base(cmd, out, i, f))
        for key in rng.sample(sorted(pools), k=min(len(pools), rng.choice((1, 2, 2, 3)))):
            opts[key] = rng.choice(pools[key]) if pools[key] else None
        argv = [cmd]
        for key, value in opts.items():
            if key == "PATH":
                argv.append(value)
            elif key != "--":
                argv += [key] if value is None else [key, value]
        if "--" in opts:
            argv += ["--", opts["--"], rng.choice(HOSTILE)]
        cases.append(argv)
    return cases


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    from prism_strategy.bench.results.store import Store

    (root / "out").mkdir()
    Store(root / "out" / "fresh.db")._run(lambda con: None)  # an empty store: read commands get past --db
    return root / "out", _write_inputs(root / "in")


def _problem(res, argv: list[str]) -> str | None:
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return f"raised {type(res.exception).__name__}: {res.exception}"
    if res.exit_code not in (0, 1, 2):
        return f"exit code {res.exit_code}"
    if "Traceback" in res.output:
        return "traceback in the output"
    if res.exit_code == 2:
        err = res.stderr.strip().splitlines()
        if len(err) != 1 or not err[0].startswith("error: "):
            return f"exit 2 without one error line: {res.stderr[:300]!r}"
    return None


@pytest.mark.parametrize("cmd", list(CASES))
def test_fuzz_command_lines_end_cleanly(cmd, world, monkeypatch):
    out, files = world
    out.mkdir(exist_ok=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(out / "cache"))  # calibrate/plan caches stay in tmp
    monkeypatch.delenv("PRISM_STRATEGY_DB", raising=False)
    monkeypatch.chdir(out)
    command = typer.main.get_command(app)  # built once: invoke(app) rebuilds it every time (~60 ms)
    monkeypatch.setattr(typer.testing, "_get_command", lambda _app: command)
    runner = CliRunner()
    failures = []
    for argv in generate(cmd, CASES[cmd], out, files):
        res = runner.invoke(app, argv, catch_exceptions=True)
        problem = _problem(res, argv)
        if problem:
            failures.append(f"{argv!r}: {problem}")
    assert not failures, f"{len(failures)} of {CASES[cmd]} {cmd} cases failed:\n" + "\n".join(failures[:25])


def test_generation_is_deterministic_and_large(world):
    out, files = world
    runs = [[generate(c, n, out, files) for c, n in CASES.items()] for _ in range(2)]
    assert runs[0] == runs[1] and sum(len(c) for c in runs[0]) >= 1000
    flat = [" ".join(a) for cmd in runs[0] for a in cmd]
    assert len(set(flat)) > 0.85 * len(flat)  # mostly different command lines
    for banned in ("bench", "ceiling", "tune", "census", "--clean", "--live"):
        assert not any(a[0] == banned or banned in a for cmd in runs[0] for a in cmd)


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["plan", "--model", "{in}/cfg_heads0/config.json"], "num_attention_heads must be between 1"),
        (["plan", "--model", "{in}/cfg_heads_odd/config.json"], "not a multiple of num_attention_heads"),
        (["plan", "--model", "{in}/cfg_huge/config.json"], "hidden_size = 100000000000...(31 digits): past any"),
        (["report", "--out", "{in}/text.txt", "--db", "{out}/fresh.db"], "is a file; give a folder"),
        (["plan", "--model", "x" * 500], "neither a preset nor a usable path"),
        (["plan", "--vision", "v" * 500], "neither a preset nor a usable path"),
        (["plan", "--nodes", "abc"], "Invalid value for '--nodes'"),
        (["analyze", "{in}/a_hang_list"], "a hang report is a JSON object"),
        (["analyze", "{in}/a_good", "--plot", "{in}/text.txt"], "name the image file with one of"),
    ],
)
def test_issue_cases_are_one_line_errors(argv, fragment, world, monkeypatch):
    """The traceback classes the issue found, and the shapes of error they now get."""
    out, files = world
    monkeypatch.setenv("XDG_CACHE_HOME", str(out / "cache"))
    root = Path(files["text.txt"]).parent
    res = CliRunner().invoke(app, [a.format(**{"in": root, "out": out}) for a in argv])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.output
    assert fragment in res.stderr and "Traceback" not in res.output


SHELL_PIECES = [
    "export ",
    "A=1 ",
    "B=$A ",
    "${X:-12} ",
    "${Y:?no} ",
    "$((1+)) ",
    "$(",
    ")",
    "`",
    "'",
    '"',
    "\\\n",
    'if [ -z "$N" ]; then ',
    "elif ",
    "else ",
    "fi ",
    "case $S in a) ",
    ";; ",
    "esac ",
    "<<EOF\n",
    "EOF\n",
    "<<'X'\n",
    "f() { ",
    "} ",
    "module load frameworks ",
    "mpiexec -n 1 -ppn ",
    "bash -lc '",
    'bash -c "',
    'ssh h "',
    "source ./x.sh ",
    "unset A ",
    "&& ",
    "|| ",
    "| ",
    "; ",
    "\n",
    "for i in 1 2; do ",
    "done ",
    "while true; do ",
    "declare -x Z=",
    "--cpu-bind depth -d ",
    "LD_PRELOAD=/usr/lib64/libpil4dfs.so ",
    "python3 - <<EOF\n",
    "print()\n",
    "#PBS -l select=",
    "{",
    "}",
    "(",
    ")",
    "[[ ",
    " ]] ",
    "\x00",
    "ü",
]


def _shell_cases(rng: random.Random) -> list[bytes]:
    fixtures = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "doctor" / "launchers").glob("*.pbs"))
    cases = [
        b"",
        bytes(rng.randrange(256) for _ in range(2048)),
        b"\xff\xfe" + "export A=1\n".encode("utf-16-le"),
        ("if [ 1 ]; then " * 1500 + "export A=1; " + "fi; " * 1500).encode(),
        b"(" * 3000 + b"x" + b")" * 3000,
    ]
    for _ in range(120):
        cases.append("".join(rng.choice(SHELL_PIECES) for _ in range(rng.randrange(1, 60))).encode())
    for path in fixtures:
        data = path.read_bytes()
        cases += [data[: rng.randrange(len(data))] for _ in range(4)]
    return cases


def test_the_shell_reader_ends_cleanly_on_random_truncated_and_binary_input(tmp_path):
    """Random shell from the constructs the reader follows, every fixture cut at random points,
    and binary bytes: each gives findings or one SpecError, never another exception."""
    from prism_strategy.diagnose.doctor import DoctorRequest, diagnose
    from prism_strategy.specs import SpecError

    rng = random.Random(SEED)
    (tmp_path / "x.sh").write_text("module load frameworks\nexport CCL_WORKER_COUNT=8\nsource ./x.sh\n")
    failures = []
    for i, data in enumerate(_shell_cases(rng)):
        path = tmp_path / f"case{i}.sh"
        path.write_bytes(data)
        for strategy in (None, "fsdp_full_shard"):
            try:
                diagnose(DoctorRequest(launchers=(path,), platform="aurora", strategy=strategy))
            except SpecError:
                pass
            except Exception as e:  # noqa: BLE001 - the point of the test
                failures.append(f"case {i} {data[:80]!r}: {type(e).__name__}: {e}")
    assert not failures, "\n".join(failures[:20])


def test_the_script_value_reader_ends_cleanly_on_truncated_scripts(tmp_path):
    from prism_strategy.diagnose.doctor import DoctorRequest, diagnose
    from prism_strategy.specs import SpecError

    rng = random.Random(SEED)
    scripts = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "doctor" / "scripts").glob("*.py"))
    failures = []
    deep = tmp_path / "deep.py"
    deep.write_text("import torch\nx = " + "+".join(["1"] * 20000) + "\ntorch.compile(x)\n")
    with pytest.raises(SpecError):
        diagnose(DoctorRequest(scripts=(deep,)))
    for k, src in enumerate(scripts):
        text = src.read_text()
        for j in range(6):
            path = tmp_path / f"s{k}_{j}.py"
            path.write_text(text[: rng.randrange(len(text) + 1)])
            try:
                diagnose(DoctorRequest(scripts=(path,), platform="aurora", nodes=2))
            except SpecError:
                pass
            except Exception as e:  # noqa: BLE001
                failures.append(f"{path.name}: {type(e).__name__}: {e}")
    assert not failures, "\n".join(failures[:20])
