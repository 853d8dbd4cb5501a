"""Guardrails and not-viable combinations, loaded from data/rules.toml.

A rule fires when every key of its `when` table matches the situation; a key the situation
does not mention never matches (so a rule about XPU stays quiet when the device is unknown).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from prism_strategy.specs.presets import DATA, build, read_toml


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    id: str
    kind: Literal["not_viable", "guardrail"]
    when: dict[str, Any]
    reason: str
    fix: str
    source: str
    refuse: bool = False

    def matches(self, situation: dict[str, Any]) -> bool:
        for key, want in self.when.items():
            if key not in situation:
                return False
            have = situation[key]
            if isinstance(want, list) and have not in want:
                return False
            if not isinstance(want, list) and have != want:
                return False
        return True

    @property
    def blocks(self) -> bool:
        """Not viable, or a guardrail strong enough that wrap() refuses."""
        return self.kind == "not_viable" or self.refuse


@dataclass(frozen=True, kw_only=True, slots=True)
class Violation:
    rule: Rule

    @property
    def message(self) -> str:
        return f"{self.rule.reason} (fix: {self.rule.fix}; source: {self.rule.source})"


@cache
def load_rules() -> tuple[Rule, ...]:
    data = read_toml(DATA / "rules.toml")
    return tuple(build(Rule, r, f"rules.toml rule {r.get('id', '?')}") for r in data.get("rule", []))


def check(situation: dict[str, Any]) -> list[Violation]:
    return [Violation(rule=r) for r in load_rules() if r.matches(situation)]


def get_rule(rule_id: str) -> Rule:
    return next(r for r in load_rules() if r.id == rule_id)
