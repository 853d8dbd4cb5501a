"""Checks of the configuration files a launch hands to wrap() and DeepSpeed: strategy.toml (as
`emit` writes it) and ds_config.json."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from prism_strategy.diagnose.findings import Context, Finding, check_observed, parse_header
from prism_strategy.runtime.strategy_file import read_strategy_file
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import get_strategy
from prism_strategy.wrap_config import WrapConfig


def _key_line(text: str, key: str) -> int:
    m = re.search(rf"^\s*\"?{re.escape(key)}\"?\s*[=:]", text, re.M)
    return text.count("\n", 0, m.start()) + 1 if m else 1


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategyTomlFile:
    path: Path
    text: str
    header: dict[str, str]
    settings: "WrapConfig"

    @classmethod
    def read(cls, path: Path, text: str) -> "StrategyTomlFile":
        return cls(path=path, text=text, header=parse_header(text), settings=read_strategy_file(path))

    def refine(self, ctx: Context) -> Context:
        h = self.header
        return ctx.refined(
            platform=h.get("platform"),
            strategy=self.settings.strategy,
            nodes=int(h["nodes"]) if h.get("nodes", "").isdigit() else None,
        )

    def check(self, ctx: Context) -> list[Finding]:
        s, f = self.settings, str(self.path)
        engine = get_strategy(s.strategy).engine
        static = bool(s.static_graph)
        unused = {"engine": engine, "find_unused_parameters": s.find_unused_parameters, "static_graph": static}
        out = check_observed(
            unused,
            ctx,
            file=f,
            line=_key_line(self.text, "find_unused_parameters"),
            detail="find_unused_parameters = true" + (" with static_graph = true" if static else ""),
        )
        if s.compile:
            out += check_observed(
                {"engine": engine, "compile": True},
                ctx,
                file=f,
                line=_key_line(self.text, "compile"),
                detail=f"compile = true with {s.strategy}",
            )
        if ctx.platform is not None and s.ranks_per_node is not None:
            want = ctx.platform.hardware.devices_per_node
            out += check_observed(
                {"ranks_per_node_matches": s.ranks_per_node == want},
                ctx,
                file=f,
                line=_key_line(self.text, "ranks_per_node"),
                detail=f"ranks_per_node = {s.ranks_per_node}, {ctx.platform.name} has {want} devices per node",
            )
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class DsConfigFile:
    path: Path
    text: str
    config: dict

    @classmethod
    def read(cls, path: Path, text: str) -> "DsConfigFile":
        try:
            cfg = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"{path} is not valid JSON (line {e.lineno}: {e.msg})") from None
        if not isinstance(cfg, dict):
            raise SpecError(f"{path} is not a DeepSpeed config (expected a JSON object)")
        return cls(path=path, text=text, config=cfg)

    def refine(self, ctx: Context) -> Context:
        return ctx.refined(engines=frozenset({"deepspeed"}))

    def check(self, ctx: Context) -> list[Finding]:
        section = self.config.get("compile")
        on = bool(section) and (not isinstance(section, dict) or any(v is True for v in section.values()))
        if not on:
            return []
        return check_observed(
            {"engine": "deepspeed", "compile": True},
            ctx,
            file=str(self.path),
            line=_key_line(self.text, "compile"),
            detail="the DeepSpeed config enables compile",
        )
