"""Parsing of list-valued options ("1,2,4" on a command line, or a list from Python)."""

from __future__ import annotations

from collections.abc import Sequence

from prism_strategy.specs.errors import SpecError


def int_list(value: Sequence[int] | str | None, name: str, minimum: int = 1) -> list[int] | None:
    """A list of integers >= minimum, in the order given; None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = [int(x) for x in value.split(",") if x.strip()]
        except ValueError:
            raise SpecError(f"{name} must be a comma list of integers, e.g. 1,2,4; got {value!r}") from None
    values = list(value)
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in values):
        raise SpecError(f"{name} needs integers >= {minimum}, got {value!r}")
    return values
