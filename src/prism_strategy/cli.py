"""Thin CLI: each command parses its options, calls one function of a stage module, prints.

Exit codes: 0 ok; 1 a finding or failure the user must act on; 2 bad input (one line, no traceback).
"""

from __future__ import annotations

import functools
import sys
from typing import Annotated, Optional

import typer

from prism_strategy.specs.errors import SpecError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Pick, configure, launch, measure and debug the data-parallel strategy of a PyTorch job.")


def cli_errors(fn):
    """Bad input (SpecError) becomes one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpecError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None

    return wrapper


def main() -> None:
    app()


if __name__ == "__main__":
    main()
