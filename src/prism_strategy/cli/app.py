"""The typer app: one-line errors (exit 2), flags shown as flags, --version, and cli_errors.

Exit codes: 0 ok; 1 a finding or failure the user must act on; 2 bad input (one line, no traceback).
"""

from __future__ import annotations

import functools
import shutil
import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

from prism_strategy.specs.errors import SpecError


def _one_line(text: str) -> str:
    return text.strip().replace("\r", "\\r").replace("\n", "\\n")


# click's exception classes as typer uses them (typer >= 0.2x vendors its own click)
_USAGE_ERROR, _CLICK_EXCEPTION = (
    next(c for c in typer.BadParameter.__mro__ if c.__name__ == name) for name in ("UsageError", "ClickException")
)


def _flags_as_flags(cmd) -> None:
    """Help shows a flag as a flag (`--json`, `--compile/--no-compile`), not as `--json <bool>`."""
    for p in cmd.params:
        if getattr(p, "is_flag", False):
            p.metavar = ""
    made = cmd.get_help_option  # click builds --help per context: blank its type column too

    def help_option(ctx, made=made):
        opt = made(ctx)
        if opt is not None:
            opt.metavar = ""
        return opt

    cmd.get_help_option = help_option
    for sub in getattr(cmd, "commands", {}).values():
        _flags_as_flags(sub)


def contradicting_flags(args: list[str]) -> str | None:
    """'--x and --no-x' when both halves of an on/off flag were passed (click keeps the last in
    silence); None otherwise. Arguments after a bare `--` are not flags."""
    flags = args[: args.index("--")] if "--" in args else args
    given = set(flags)
    for a in flags:
        if a.startswith("--no-") and "--" + a[5:] in given:
            return f"--{a[5:]} and {a}"
    return None


class OneLineErrors(TyperGroup):
    """A usage error (unknown option, a value of the wrong type) is one line on stderr and exit
    code 2, like every other bad input, instead of click's usage block."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        _flags_as_flags(self)
        if standalone_mode and (clash := contradicting_flags(sys.argv[1:] if args is None else list(args))):
            typer.echo(f"error: {clash} both given; pass one of them", err=True)
            sys.exit(2)
        # help as wide as the terminal says (COLUMNS), up to HELP_OPTIONS' 100
        self.context_settings = self.context_settings | {"terminal_width": shutil.get_terminal_size().columns}
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _USAGE_ERROR as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `prism-strategy`: the help
                typer.echo(e.format_message())
                sys.exit(e.exit_code)
            hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
            typer.echo(f"error: {_one_line(e.format_message())}{hint}", err=True)
            sys.exit(2)
        except _CLICK_EXCEPTION as e:
            typer.echo(f"error: {_one_line(e.format_message())}", err=True)
            sys.exit(e.exit_code)
        except typer.Abort:
            typer.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


HELP_OPTIONS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=OneLineErrors,
    context_settings=HELP_OPTIONS,
    rich_markup_mode=None,  # click's help layout: option names wrap at 30 columns, descriptions keep the rest
    help="Pick, configure, launch, measure and debug the data-parallel strategy of a PyTorch job.",
)


def _print_version(value: bool) -> None:
    if value:
        from prism_strategy import __version__

        typer.echo(f"prism-strategy {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", help="Print the version and exit", is_eager=True, callback=_print_version)
    ] = False,
) -> None:
    """Pick, configure, launch, measure and debug the data-parallel strategy of a PyTorch job."""


def cli_errors(fn):
    """Bad input (SpecError) becomes one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpecError as e:
            typer.echo(f"error: {_one_line(str(e))}", err=True)
            raise typer.Exit(2) from None

    return wrapper


def print_json(data) -> None:
    import json

    typer.echo(json.dumps(data, indent=2, default=str))
