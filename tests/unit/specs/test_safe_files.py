"""specs/safe_files.py: the one edge user files go through (issue 38 item 2). Each hostile input
of the issue is refused with one line naming the file (and the field where there is one), and a
real file's ordinary shapes (an anchor used twice, a 5-level table) still load."""

from __future__ import annotations

import json
import os
import threading

import pytest

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import (
    ALIAS_BUDGET,
    MAX_DEPTH,
    MAX_YAML_BYTES,
    check_writable_folder,
    finite_float,
    finite_int,
    flow_depth,
    load_json,
    load_toml,
    load_yaml,
    read_text_capped,
)

BOMB = "".join(
    [f"a: &a [{', '.join(['lol'] * 9)}]\n"]
    + [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi")]
)
"""The 9-level, 9-fold YAML alias bomb of the issue (9**9 = 387M leaves once expanded)."""


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg
    return msg


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "ds_config.json"
    os.mkfifo(fifo)
    done: list[str] = []

    def read() -> None:
        try:
            load_json(fifo, "--from")
        except SpecError as e:
            done.append(str(e))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(20)  # a blocking open never returns without a writer; the refusal is immediate
    if t.is_alive():  # unblock the reader so the test process can end, then fail
        with open(fifo, "w"):
            pass
    assert done and "a FIFO, not a regular file" in done[0] and str(fifo) in done[0]


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused_before_reading(path):
    with pytest.raises(SpecError, match="a device or socket, not a regular file") as e:
        read_text_capped(path, "--from")
    assert path in _one_line(e)


def test_a_folder_and_a_missing_file_are_one_line(tmp_path):
    with pytest.raises(SpecError, match="a folder, not a regular file"):
        load_toml(tmp_path)
    with pytest.raises(SpecError, match="no such file"):
        load_toml(tmp_path / "nope.toml")


def test_a_file_over_the_cap_is_refused(tmp_path):
    big = tmp_path / "config.json"
    big.write_text('{"a": "' + "x" * 2000 + '"}')
    with pytest.raises(SpecError, match="larger than"):
        read_text_capped(big, "model config", cap=1000)
    assert read_text_capped(big, "model config", cap=4000).startswith('{"a"')


def test_binary_and_non_utf8_are_refused(tmp_path):
    f = tmp_path / "x.json"
    f.write_bytes(b"\x00\x01{}")
    with pytest.raises(SpecError, match="binary"):
        load_json(f)
    f.write_bytes(b"\xff\xfe{}")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_json(f)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 2, 975, 5000])
def test_deep_nesting_is_refused_at_any_depth(tmp_path, depth):
    f = tmp_path / "deep.json"
    f.write_text('{"zero_optimization": {"stage": 1}, "x": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(SpecError, match="nests deeper than") as e:
        load_json(f, "--from")
    assert str(f) in _one_line(e)
    t = tmp_path / "deep.toml"
    t.write_text("x = " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(SpecError, match="nests deeper than"):
        load_toml(t)


def test_nesting_a_real_config_uses_loads(tmp_path):
    f = tmp_path / "ds.json"
    f.write_text(json.dumps({"zero_optimization": {"offload_optimizer": {"device": {"a": {"b": [1, [2]]}}}}}))
    assert load_json(f)["zero_optimization"]["offload_optimizer"]["device"]["a"]["b"] == [1, [2]]


def test_the_yaml_alias_bomb_is_refused_by_the_budget(tmp_path):
    f = tmp_path / "accelerate.yaml"
    f.write_text(BOMB + "distributed_type: MULTI_GPU\n")
    assert len(f.read_bytes()) < 700  # the 681-byte bomb
    with pytest.raises(SpecError, match="aliases expand to more than") as e:
        load_yaml(f, "--from")
    assert str(f) in _one_line(e)


def test_an_anchor_used_a_few_times_loads(tmp_path):
    f = tmp_path / "accelerate.yaml"
    f.write_text("base: &b {mixed_precision: bf16, num_processes: 8}\none: *b\ntwo: *b\nthree: [*b, *b]\n")
    assert load_yaml(f)["three"][1]["num_processes"] == 8
    two_budgets = tmp_path / "wide.yaml"  # the budget counts expanded values, not aliases
    two_budgets.write_text("a: &a [" + ", ".join(["1"] * 200) + "]\nb: [" + ", ".join(["*a"] * 60) + "]\n")
    assert 60 * 200 > ALIAS_BUDGET
    with pytest.raises(SpecError, match="aliases expand"):
        load_yaml(two_budgets)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"zero_optimization": {"stage": NaN}}', "zero_optimization.stage = nan"),
        ('{"train_batch_size": Infinity}', "train_batch_size = inf"),
        ('{"train_batch_size": 1e309}', "train_batch_size = inf"),
        ('{"a": [1, {"b": -Infinity}]}', "a[1].b = -inf"),
        ('{"train_batch_size": 1' + "0" * 400 + "}", "train_batch_size = 100000000000...(401 digits)"),
    ],
)
def test_non_finite_and_huge_numbers_are_named_by_path(tmp_path, text, said):
    f = tmp_path / "ds_config.json"
    f.write_text(text)
    with pytest.raises(SpecError) as e:
        load_json(f, "--from")
    assert said in _one_line(e) and f"--from {f}" in str(e.value)


@pytest.mark.parametrize(("text", "said"), [("x = inf\n", "x = inf"), ("[t]\ny = nan\n", "t.y = nan")])
def test_toml_and_yaml_infinities_too(tmp_path, text, said):
    f = tmp_path / "p.toml"
    f.write_text(text)
    with pytest.raises(SpecError, match=said.replace(".", r"\.")):
        load_toml(f)
    y = tmp_path / "a.yaml"
    y.write_text("num_processes: .inf\n")
    with pytest.raises(SpecError, match="num_processes = inf"):
        load_yaml(y)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e309, 10**400, True, "8", 2.5, -1, None, [1]])
def test_finite_int_refuses_everything_but_an_integer_in_bounds(bad):
    with pytest.raises(SpecError, match="stage must be an integer >= 0") as e:
        finite_int(bad, "stage", "--from ds.json", 0)
    assert _one_line(e).startswith("--from ds.json: stage")


def test_finite_int_takes_integral_floats_and_its_bounds():
    got = finite_int(3.0, "stage", "f", 0, 3)
    assert got == 3 and type(got) is int
    with pytest.raises(SpecError, match=r"in 0\.\.3, got 4"):
        finite_int(4, "stage", "f", 0, 3)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 2e15, False, "1"])
def test_finite_float_refuses_non_finite_and_out_of_bounds(bad):
    with pytest.raises(SpecError, match="bucket must be a finite number"):
        finite_float(bad, "bucket", "f", 0.0)
    assert finite_float(25, "bucket", "f", 0.0) == 25.0


def test_an_unwritable_folder_is_refused_without_creating_anything(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    with pytest.raises(SpecError, match="is a file, not a folder") as e:
        check_writable_folder(f / "logs" / "run1", "out_dir")
    assert "out_dir" in _one_line(e)
    check_writable_folder(tmp_path / "new" / "deeper")  # makeable: fine, and not made
    assert not (tmp_path / "new").exists()


def test_yaml_flow_nesting_is_measured_before_parsing(tmp_path):
    """PyYAML's scanner is quadratic in flow depth (1,200 levels took 2-3 s, 100,000 would take
    hours): the depth is measured in one pass first; quotes and comments do not count."""
    assert flow_depth("a: [1, {b: '[[[['}]  # [[[[\nc: \"{{{\"\n") == 2
    f = tmp_path / "accelerate.yaml"
    f.write_text("distributed_type: MULTI_GPU\nx: " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(SpecError, match="nests deeper than") as e:
        load_yaml(f, "--from")
    assert str(f) in _one_line(e)


def test_a_yaml_file_over_its_cap_is_refused_unparsed(tmp_path):
    f = tmp_path / "accelerate.yaml"
    f.write_text("k: v\n" * (MAX_YAML_BYTES // 5 + 1))
    with pytest.raises(SpecError, match="KiB of YAML"):
        load_yaml(f)
