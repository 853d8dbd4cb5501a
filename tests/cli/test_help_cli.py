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
