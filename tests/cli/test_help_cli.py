"""Help: every option of every command is described, flags read as flags, -h and --version work,
and defaults agree across commands (calibrate fits the platform plan plans for by default)."""

import typer
from typer.testing import CliRunner

from prism_strategy import __version__
from prism_strategy.cli import app
from prism_strategy.report.plan_table import estimate_lines

runner = CliRunner()


def _commands(cmd, path=()):
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_every_option_is_described():
    missing = [
        f"{' '.join(path)} {p.opts[0]}"
        for path, cmd in _commands(typer.main.get_command(app))
        for p in cmd.params
        if p.param_type_name == "option" and not p.help
    ]
    assert missing == []


def test_help_shows_flags_as_flags_and_takes_h():
    for path, _ in _commands(typer.main.get_command(app)):
        r = runner.invoke(app, [*path, "-h"], env={"COLUMNS": "100"})
        assert r.exit_code == 0, (path, r.output)
        assert "<bool>" not in r.stdout, path
        assert all(len(line) <= 100 for line in r.stdout.splitlines()), path


def test_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.stdout.strip() == f"prism-strategy {__version__}"


def test_calibrate_defaults_to_plans_platform():
    def default(cmd, name):
        return next(p.default for p in typer.main.get_command(app).commands[cmd].params if p.name == name)

    assert default("calibrate", "platform") == default("plan", "platform") == "aurora"


def test_estimate_lines_fit_100_columns():
    d = {
        "strategy": "fsdp_full_shard",
        "micro_batch": 2,
        "traced_method": "traced: FakeTensorMode + fake process group world=4 (mesh 4), FSDPMemTracker",
        "traced_seconds": 4.5,
        "traced_memory_gib": {"total": 1.0},
        "memory_gib": {"total": 1.1},
        "traced_phase": "backward",
        "traced_max_micro_batch": 9,
        "traced_notes": ["x" * 30 + " a long note " * 12],
    }
    assert all(len(line) <= 100 for line in estimate_lines(d))


def test_help_at_100_columns_leaves_descriptions_most_of_the_width():
    """Issue #26 finding 11: at 100 columns the option names took ~60 and squeezed descriptions
    to ~33 characters, cutting a word. Option names now wrap at 30: descriptions start by column
    34 and no word is cut (every description word is one of the option's help words)."""
    import re

    for path, cmd in _commands(typer.main.get_command(app)):
        r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
        starts = [m.start(2) for x in r.stdout.splitlines() if (m := re.match(r"  (-\S.*?\S)  +(\S)", x))]
        assert starts and max(starts) <= 34, (path, max(starts, default=None))
        helps = " ".join(
            [f"{p.help} {p.default} {getattr(p, 'envvar', None) or ''}" for p in cmd.params]
            + [c.help or "" for c in getattr(cmd, "commands", {}).values()]
        )
        words = set(re.findall(r"[A-Za-z]{4,}", helps + " " + (cmd.help or "")))
        described = [
            x[m.start(2) :] if (m := re.match(r"  (-\S.*?\S)  +(\S)", x)) else x[34:]
            for x in r.stdout.splitlines()
            if x.startswith(" " * 34) or re.match(r"  (-\S.*?\S)  +(\S)", x)
        ]
        for line in described:
            for w in re.findall(r"[A-Za-z]{4,}", line):
                assert w in words or w.lower() in ("default", "required", "show", "this", "message", "exit"), (path, w)


OWN_HELP = {
    # samples per rank, always given: the field's "not given: largest that fits" is not on offer there
    **{(cmd, "micro_batch"): "per rank" for cmd in ("bench", "census", "commbench")},
    # emit's values go to its EmitRequest, merged with --from-plan's, and spell their own defaults
    **{("emit", n): "EmitRequest" for n in ("precision", "ckpt_freq", "loss", "micro_batch", "grad_accum", "compile")},
    # a logged run's facts, each defaulting to what the log says: an import row, not a policy
    **{("results import", n): "the log's" for n in ("micro_batch", "grad_accum", "seq_len", "ckpt_freq", "precision")},
    # these calibrate stored runs' predictions, not a plan's MeasuredPolicy
    **{(cmd, "calibration"): "stored runs" for cmd in ("compare", "tune", "report")},
}
"""Options named as a policy field that keep their own help, and why (issue 37: only a flag that
fills exactly one field takes that field's docstring)."""


def test_policy_options_take_their_help_from_the_fields_docstring():
    """Issue 37: a flag that fills one policy field is described by that field's docstring, so the
    help and the code cannot drift (cli/options.py FIELD_OF, field_option)."""
    from prism_strategy.cli.options import FIELD_OF, field_help

    seen, drifted = set(), []
    for path, cmd in _commands(typer.main.get_command(app)):
        for p in getattr(cmd, "params", []):
            if p.param_type_name != "option" or p.name not in FIELD_OF:
                continue
            key = (" ".join(path), p.name)
            seen.add(key)
            if key not in OWN_HELP and p.help != field_help(*FIELD_OF[p.name]):
                drifted.append(key)
    assert drifted == []
    assert set(OWN_HELP) <= seen  # no stale exception
    plan_flags = {name for cmd, name in seen if cmd == "plan"}
    assert plan_flags == set(FIELD_OF)  # plan takes every policy flag


def test_field_help_is_the_docstring_under_the_field_on_one_line():
    from prism_strategy.cli.options import field_help
    from prism_strategy.specs.policies import BatchPolicy, MemoryPolicy

    assert field_help(BatchPolicy, "seq_len") == "Text tokens per sample, the longest (peak memory is predicted there)."
    assert field_help(MemoryPolicy, "compile_loss").startswith("With compile, the loss compiled too")
    assert "\n" not in field_help(MemoryPolicy, "checkpointing")
    r = runner.invoke(app, ["plan", "-h"], env={"COLUMNS": "100"})
    assert "planner searches it per option" in r.stdout


def test_field_help_refuses_a_field_without_a_docstring():
    """A missing docstring is an error where the option is declared (import time), never an empty help."""
    import pytest

    from prism_strategy.cli.options import field_help
    from prism_strategy.specs.policies import MemoryPolicy
    from prism_strategy.specs.training import TrainingSpec

    with pytest.raises(ValueError, match="TrainingSpec.compute_dtype has no docstring"):
        field_help(TrainingSpec, "compute_dtype")
    with pytest.raises(ValueError, match="no field 'ckpt_freq'"):
        field_help(MemoryPolicy, "ckpt_freq")
