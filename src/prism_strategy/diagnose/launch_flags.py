"""Flags a launcher passes to the training script, read through the script's argparse: the
value `args.<dest>` has in the job is the launch's argv parsed by the script's own
`add_argument` calls (store_true / store_false / a constant default), so
`DDP(..., find_unused_parameters=args.find_unused_parameters)` under
`python train.py --find-unused-parameters --static-graph` is the keyword form the doctor
already catches (data/rules.toml find-unused-vs-static-graph). Nothing is imported or run.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from prism_strategy.diagnose.findings import Context, Finding, check_observed
from prism_strategy.diagnose.rendezvous_checks import check_empty_script, check_env_rendezvous_under_pmi

_DDP = {"DistributedDataParallel", "DDP"}
_FLAGS = ("find_unused_parameters", "static_graph")


@dataclass(frozen=True, kw_only=True, slots=True)
class Flag:
    dest: str
    options: tuple[str, ...]
    action: str
    default: Any


def script_argv(timeline) -> list[tuple[str, tuple[str, ...], str, int]]:
    """(script file name, the arguments after it, launcher file, line) of every launch of a .py."""
    out = []
    for e in timeline:
        if e.kind != "launch":
            continue
        args = list(e.args)
        i = next((k for k, a in enumerate(args) if a.endswith(".py")), None)
        if i is not None:
            out.append((args[i].rsplit("/", 1)[-1], tuple(args[i + 1 :]), e.file, e.line))
    return out


def argparse_flags(calls) -> dict[str, Flag]:
    """The script's `parser.add_argument(...)` flags by dest (literal options and keywords only)."""
    out = {}
    for c in calls:
        if c.last != "add_argument":
            continue
        opts = tuple(a.value for a in c.node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
        if not opts or not opts[0].startswith("-"):
            continue
        kw = {k.arg: k.value for k in c.node.keywords if k.arg}
        action = _const(kw.get("action"), "store")
        long = next((o for o in opts if o.startswith("--")), opts[0])
        dest = _const(kw.get("dest"), long.lstrip("-").replace("-", "_"))
        default = _const(kw.get("default"), action == "store_false" if action.startswith("store_") else None)
        out[dest] = Flag(dest=dest, options=opts, action=action, default=default)
    return out


def _const(node: ast.expr | None, default: Any) -> Any:
    return node.value if isinstance(node, ast.Constant) else default


def flag_value(flag: Flag, argv: tuple[str, ...]) -> Any:
    """What argparse gives `flag` for argv: the last mention wins, as argparse applies them in order."""
    value = flag.default
    for k, a in enumerate(argv):
        name, _, inline = a.partition("=")
        if name not in flag.options:
            continue
        if flag.action == "store_true":
            value = True
        elif flag.action == "store_false":
            value = False
        elif flag.action == "store":
            raw = inline or (argv[k + 1] if k + 1 < len(argv) else "")
            value = raw.lower() in ("1", "true", "yes", "on") if raw else value
    return value


def _args_attr(node: ast.expr | None) -> str | None:
    """`args.x` (any name bound to parse_args(): the attribute is what argparse names)."""
    return node.attr if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) else None


def _flag_tested(test: ast.expr) -> str | None:
    """`args.x` or `getattr(args, "x", ...)` as an `if` test: the flag's dest."""
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "getattr":
        name = test.args[1] if len(test.args) > 1 else None
        return name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else None
    return _args_attr(test)


def off_by_flag(s, call, ctx: Context) -> str | None:
    """The note for a call that runs only under an `if` on an argparse flag that is off by
    default (store_true) and that no launcher given passes; None otherwise."""
    flags = argparse_flags(s.calls)
    launches = [x for x in ctx.script_argv if x[0] == s.path.name]
    for test, side in call.conds:
        flag = flags.get(_flag_tested(test) or "")
        if flag is None or not side or flag.action != "store_true" or flag.default:
            continue
        if not any(flag_value(flag, argv) for _, argv, _, _ in launches):
            return (
                f"only when the script is run with {flag.options[0]} (off by default, and no launcher given passes it)"
            )
    return None


def check_ddp_flags(s, ctx: Context) -> list[Finding]:
    """DDP keywords read from argparse flags, as each launch of this script passes them."""
    flags = argparse_flags(s.calls)
    launches = [x for x in ctx.script_argv if x[0] == s.path.name]
    out: list[Finding] = []
    for c in s.calls:
        if c.last not in _DDP:
            continue
        dests = {k: _args_attr(c.kwarg(k)) for k in _FLAGS}
        if dests["find_unused_parameters"] not in flags:
            continue
        for _, argv, file, line in launches:
            vals = {k: bool(flag_value(flags[d], argv)) if d in flags else False for k, d in dests.items()}
            if not vals["find_unused_parameters"]:
                continue
            passed = " ".join(a for a in argv if a.split("=")[0] in {o for f in flags.values() for o in f.options})
            detail = (
                f"{c.last}(find_unused_parameters=args.{dests['find_unused_parameters']}"
                + (f", static_graph=args.{dests['static_graph']}" if vals["static_graph"] else "")
                + f") with `{passed}` from {file}:{line}"
            )
            observed = {"engine": "ddp", **vals}
            out += [f for f in check_observed(observed, ctx, **s.where(c, detail)) if f not in out]
    return out


def script_launch_checks(s, ctx: Context) -> list[Finding]:
    """The script as the launchers start it (argparse flags, the rendezvous srun / mpiexec leave
    it), and a script with nothing in it."""
    return check_empty_script(s.path, ctx) + check_ddp_flags(s, ctx) + check_env_rendezvous_under_pmi(s, ctx)
