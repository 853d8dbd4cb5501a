"""`calibrate --fit comm` on a real nccl-tests log: Google Cloud A3 Mega, 2 nodes x 8 H100,
all_reduce_perf 8 B..8 GiB (tests/fixtures/imports/all_reduce_perf_2x8_h100_a3mega.out, its source
in its header). What is asserted comes from the log's own columns, read here apart from the tool's
reader: the in-place time (us) and busbw (GB/s) per size."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.estimate.calibration import calibrated_platform
from prism_strategy.estimate.comm import collective_seconds, model_description
from prism_strategy.specs import load_platform

LOG = Path(__file__).parents[1] / "fixtures" / "imports" / "all_reduce_perf_2x8_h100_a3mega.out"
runner = CliRunner()


def _columns() -> dict[int, tuple[float, float]]:
    """size (B) -> (in-place seconds, in-place busbw GB/s), straight from the log's rows."""
    rows = [line.split() for line in LOG.read_text().splitlines() if line.strip()[:1].isdigit()]
    return {int(r[0]): (float(r[9]) * 1e-6, float(r[11])) for r in rows}


def _import(db: Path, log: Path = LOG) -> None:
    r = runner.invoke(
        app,
        [
            "results",
            "import",
            str(log),
            "--format",
            "nccl-tests",
            "--platform",
            "dgx-h100",
            "--nodes",
            "2",
            "--db",
            str(db),
        ],
    )
    assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("commfit")
    _import(tmp / "r.db")
    out = tmp / "cal.toml"
    r = runner.invoke(
        app,
        [
            "calibrate",
            "--platform",
            "dgx-h100",
            "--db",
            str(tmp / "r.db"),
            "--out",
            str(out),
            "--fit",
            "comm",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), out


def test_the_fit_says_what_decided_each_term_and_what_it_holds(calibrated):
    report, out = calibrated
    c = report["comm"]
    assert report["written"] and out.is_file() and c["points"] == len(_columns())
    terms = {t["name"]: t for t in c["terms"]}
    assert "8 B" in terms["nccl_scale.base_latency"]["decided_by"]  # small sizes decide latency
    assert "8 GiB" in terms["nccl_scale.inter_bw"]["decided_by"]  # large ones bandwidth
    for held in ("nccl_scale.intra_latency", "nccl_scale.net_latency"):  # one rank count: per hop vs base
        assert "cannot be told apart" in terms[held]["held"] and terms[held]["after"] == terms[held]["before"]
    assert terms["nccl_scale.intra_bw"]["held"] and terms["nccl_scale.intra_bw"]["after"] == 1.0  # no 1-node rows
    assert c["leave_one_out"] == [] and "one rank count and one op" in c["leave_one_out_note"]
    assert c["after"]["comm_median"] < c["before"]["comm_median"]


def test_sizes_not_in_the_log_price_between_their_measured_neighbours(calibrated):
    _, out = calibrated
    p, cols = calibrated_platform(load_platform("dgx-h100"), str(out)), _columns()
    for lo, hi in ((2**29, 2**30), (2**31, 2**32)):  # 768 MiB and 3 GiB: bandwidth-bound, not in the log
        t = collective_seconds("all_reduce", (lo + hi) / 2, 16, 2, 1, p)
        assert cols[lo][0] < t < cols[hi][0]
    assert "calibrated" in p.source("nccl_scale.base_latency")
    assert "fitted to measured curves: base_latency x" in model_description(p)  # the plan's provenance says so


def test_the_fitted_bus_bandwidth_is_the_logs_large_size_busbw(calibrated):
    """busbw = algbw x 2(N-1)/N (nccl-tests doc/PERFORMANCE.md) is what the fit's bus bandwidth
    means; one bandwidth must lie within the log's busbw over the sizes it decides (>= 1 GiB,
    where the log's own busbw still grows from 298.8 to 337.4 GB/s)."""
    report, _ = calibrated
    (bw,) = report["comm"]["bus_bandwidth"]
    large = [busbw for size, (_, busbw) in _columns().items() if size >= 2**30]
    assert bw["measured_busbw_gbps"] == pytest.approx(_columns()[2**33][1], rel=0.002)
    assert min(large) <= bw["fitted_busbw_gbps"] <= max(large)


def test_the_human_report_fits_100_columns_and_names_every_term(calibrated, tmp_path):
    _, out = calibrated
    db = tmp_path / "r.db"
    _import(db)
    r = runner.invoke(
        app,
        ["calibrate", "--platform", "dgx-h100", "--db", str(db), "--out", str(tmp_path / "c.toml"), "--fit", "comm"],
    )
    assert r.exit_code == 0 and all(len(line) <= 100 for line in r.output.splitlines()) and "nan" not in r.output
    assert all(t in r.output for t in ("base_latency", "intra_latency", "net_latency", "intra_bw", "inter_bw"))


def test_a_log_with_one_size_cannot_fit(tmp_path):
    lines = LOG.read_text().splitlines()
    rows = [i for i, line in enumerate(lines) if line.strip()[:1].isdigit()]
    one = tmp_path / "all_reduce_perf_one.out"
    one.write_text("\n".join(lines[: rows[0]] + [lines[rows[-1]]] + lines[rows[-1] + 1 :]) + "\n")
    _import(tmp_path / "r.db", one)
    r = runner.invoke(
        app,
        [
            "calibrate",
            "--platform",
            "dgx-h100",
            "--db",
            str(tmp_path / "r.db"),
            "--out",
            str(tmp_path / "c.toml"),
            "--fit",
            "comm",
        ],
    )
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "cannot fit" in r.stderr
    assert not (tmp_path / "c.toml").exists()


@pytest.mark.parametrize("args, says", [(["--fit", "comm"], "no collective curves"), (["--fit", "nope"], "--fit")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    r = runner.invoke(
        app,
        [
            "calibrate",
            "--platform",
            "dgx-h100",
            "--db",
            str(tmp_path / "r.db"),
            "--out",
            str(tmp_path / "c.toml"),
            *args,
        ],
    )
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and says in r.stderr
    assert not (tmp_path / "c.toml").exists()


OCI = [Path(__file__).parents[1] / "fixtures" / "imports" / f"all_reduce_perf_{n}x8_a100_oci.out" for n in (1, 2)]


@pytest.fixture(scope="module")
def two_rank_counts(tmp_path_factory):
    """Oracle Cloud's published 1 x 8 and 2 x 8 A100 runs (one page, one shared host): two rank
    counts of one op on one platform, so the fit can be left out one rank count at a time."""
    tmp = tmp_path_factory.mktemp("oci")
    for nodes, log in enumerate(OCI, 1):
        r = runner.invoke(
            app,
            [
                "results",
                "import",
                str(log),
                "--format",
                "nccl-tests",
                "--platform",
                "dgx-a100-40",
                "--nodes",
                str(nodes),
                "--db",
                str(tmp / "r.db"),
            ],
        )
        assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        [
            "calibrate",
            "--platform",
            "dgx-a100-40",
            "--db",
            str(tmp / "r.db"),
            "--out",
            str(tmp / "cal.toml"),
            "--fit",
            "comm",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["comm"]


def test_a_second_rank_count_tells_the_network_hop_from_the_base_latency(two_rank_counts):
    terms = {t["name"]: t for t in two_rank_counts["terms"]}
    assert "2x8" in terms["nccl_scale.net_latency"]["decided_by"] and not terms["nccl_scale.net_latency"]["held"]
    # both runs have 8 GPUs per node: the NVLink hops per call are the same, so still not told apart
    assert "cannot be told apart" in terms["nccl_scale.intra_latency"]["held"]
    assert "1x8" in terms["nccl_scale.intra_bw"]["decided_by"] and "2x8" in terms["nccl_scale.inter_bw"]["decided_by"]


def test_leave_one_rank_count_out_is_reported_and_says_what_the_other_cannot_carry(two_rank_counts):
    loo = {row["left_out"]: row for row in two_rank_counts["leave_one_out"]}
    assert set(loo) == {"ranks 1x8", "ranks 2x8"} and all(row["points"] == 28 for row in loo.values())
    # without the 2x8 run nothing decides the inter-node bandwidth: its preset prices the 2x8 points,
    # worse than the fit that saw them
    assert loo["ranks 2x8"]["median_abs_err_pct"] > two_rank_counts["after"]["comm_median"]


def test_each_fitted_bus_bandwidth_lies_within_what_its_log_measured(two_rank_counts):
    """One bandwidth per group shape, fitted over its bandwidth-bound sizes: it lies within the
    busbw the log printed over them (>= 16 MiB here; the 2x8 run has a slow regime from 16 to
    256 MiB at 33-37 GB/s under the 70-72 GB/s above it, which one bandwidth cannot follow)."""
    for bw, log in zip(two_rank_counts["bus_bandwidth"], OCI):
        rows = [line.split() for line in log.read_text().splitlines() if line.strip()[:1].isdigit()]
        busbw = [float(r[11]) for r in rows if int(r[0]) >= 2**24]
        assert min(busbw) <= bw["fitted_busbw_gbps"] <= max(busbw)


def test_without_inter_node_rows_the_network_terms_are_held_at_the_preset(tmp_path):
    """Only the 1 x 8 run: nothing crosses a node, so the network hop latency and the inter-node
    bandwidth keep the preset's values, and the report says why."""
    r = runner.invoke(
        app,
        [
            "results",
            "import",
            str(OCI[0]),
            "--format",
            "nccl-tests",
            "--platform",
            "dgx-a100-40",
            "--nodes",
            "1",
            "--db",
            str(tmp_path / "r.db"),
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        [
            "calibrate",
            "--platform",
            "dgx-a100-40",
            "--db",
            str(tmp_path / "r.db"),
            "--out",
            str(tmp_path / "cal.toml"),
            "--fit",
            "comm",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    terms = {t["name"]: t for t in json.loads(r.stdout)["comm"]["terms"]}
    for name in ("nccl_scale.net_latency", "nccl_scale.inter_bw"):
        assert (
            terms[name]["after"] == 1.0 and "no " in terms[name]["held"] and "point exercises it" in terms[name]["held"]
        )
    assert terms["nccl_scale.intra_bw"]["decided_by"]
