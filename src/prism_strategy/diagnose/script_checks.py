"""Script checks: static analysis of a training script with `ast` (nothing is imported or run).

The reader records every call with its resolved dotted name (import aliases expanded), the
function it sits in and whether a loop encloses it; each check turns what it finds into facts
for one rule of data/rules.toml.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from prism_strategy.diagnose.doctor import Context, Finding, check_rule, context_facts
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import STRATEGY_NAMES, get_strategy

_DDP = {"DistributedDataParallel", "DDP"}
_FSDP1 = {"FullyShardedDataParallel", "FSDP"}
_MESH = {"init_device_mesh", "DeviceMesh"}
_CTORS = {"ones", "zeros", "empty", "rand", "randn", "full", "tensor"}
_FP32 = {"float32", "float"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    name: str
    """Dotted name with import aliases expanded, e.g. torch.distributed.init_process_group."""
    node: ast.Call
    scope: str
    """Enclosing function ('<module>' at top level)."""
    in_loop: bool

    @property
    def last(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def line(self) -> int:
        return self.node.lineno

    def kwarg(self, name: str) -> ast.expr | None:
        return next((k.value for k in self.node.keywords if k.arg == name), None)

    def kw_true(self, name: str) -> bool:
        v = self.kwarg(name)
        return isinstance(v, ast.Constant) and v.value is True


@dataclass(kw_only=True, slots=True)
class _Collector(ast.NodeVisitor):
    aliases: dict[str, str] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)
    calls: list[Call] = field(default_factory=list)
    assigns: dict[tuple[str, str], list[tuple[int, ast.expr]]] = field(default_factory=dict)
    words: set[str] = field(default_factory=set)
    scope: str = "<module>"
    loops: int = 0

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            bound = a.asname or a.name.split(".")[0]
            self.aliases[bound] = a.name if a.asname else bound
            self.modules.add(bound)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for a in node.names:
            self.aliases[a.asname or a.name] = f"{node.module or ''}.{a.name}"

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer, loops = self.scope, self.loops
        self.scope, self.loops = node.name, 0
        for d in node.decorator_list:
            self._note_decorator(d)
        for stmt in node.body:
            self.visit(stmt)
        self.scope, self.loops = outer, loops

    visit_AsyncFunctionDef = visit_FunctionDef

    def _loop(self, node: ast.AST) -> None:
        self.loops += 1
        self.generic_visit(node)
        self.loops -= 1

    visit_For = visit_While = visit_AsyncFor = visit_ListComp = visit_GeneratorExp = _loop

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            if isinstance(t, ast.Name):
                self.assigns.setdefault((self.scope, t.id), []).append((node.lineno, node.value))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = self.dotted(node.func)
        if name:
            self.calls.append(Call(name=name, node=node, scope=self.scope, in_loop=self.loops > 0))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        self.words.add(node.id.lower())

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.words.add(node.attr.lower())
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and len(node.value) < 40:
            self.words.add(node.value.lower())

    def _note_decorator(self, d: ast.expr) -> None:
        target = d.func if isinstance(d, ast.Call) else d
        name = self.dotted(target)
        if name:
            fake = ast.Call(func=target, args=[], keywords=[], lineno=d.lineno, col_offset=0)
            self.calls.append(Call(name=name, node=fake, scope=self.scope, in_loop=False))

    def dotted(self, node: ast.expr) -> str:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return ""
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptFile:
    path: Path
    calls: list[Call]
    assigns: dict[tuple[str, str], list[tuple[int, ast.expr]]]
    words: frozenset[str]
    modules: frozenset[str]
    """Names bound to imported modules (their .compile() is not torch's)."""

    def refine(self, ctx: Context) -> Context:
        devices = {d for d, words in (("xpu", {"xpu", "xccl"}), ("cuda", {"cuda", "nccl"})) if words & self.words}
        return ctx.refined(devices=frozenset(devices), engines=frozenset(self.engines()))

    def engines(self) -> set[str]:
        out = set()
        for c in self.calls:
            if c.last in _DDP:
                out.add("ddp")
            if c.last in _FSDP1 or c.last == "fully_shard":
                out.add("fsdp2")
            if c.name.startswith("deepspeed."):
                out.add("deepspeed")
            if c.last == "wrap" and (name := _wrap_strategy(c)):
                out.add(get_strategy(name).engine)
        return out

    def check(self, ctx: Context) -> list[Finding]:
        return [f for check in (_device_id, _unused_and_static, _compile, _empty_cache, _loader_after_mesh,
                                _one_element_probe, _root_only_wrap) for f in check(self, ctx)]

    def find(self, *lasts: str) -> list[Call]:
        return [c for c in self.calls if c.last in lasts]

    def where(self, call: Call, detail: str) -> dict:
        return dict(file=str(self.path), line=call.line, detail=detail)


def read_script(path: Path) -> ScriptFile:
    path = Path(path)
    try:
        tree = ast.parse(path.read_text(errors="replace"), filename=str(path))
    except OSError as e:
        raise SpecError(f"cannot read --script {path}: {e.strerror}") from None
    except SyntaxError as e:
        raise SpecError(f"--script {path} is not valid Python (line {e.lineno}: {e.msg})") from None
    c = _Collector()
    c.visit(tree)
    return ScriptFile(path=path, calls=c.calls, assigns=c.assigns, words=frozenset(c.words), modules=frozenset(c.modules))


def _wrap_strategy(c: Call) -> str | None:
    args = [*c.node.args[1:2], c.kwarg("strategy")]
    return next((a.value for a in args if isinstance(a, ast.Constant) and a.value in STRATEGY_NAMES), None)


# --- the checks ------------------------------------------------------------------------------
def _device_id(s: ScriptFile, ctx: Context) -> list[Finding]:
    return [f for c in s.find("init_process_group") if c.kwarg("device_id") is not None
            for f in check_rule("xpu-no-device-id", context_facts(ctx, passes_device_id=True),
                                **s.where(c, "init_process_group(..., device_id=...)"))]


def _unused_and_static(s: ScriptFile, ctx: Context) -> list[Finding]:
    out = []
    set_static = any(c.last == "_set_static_graph" for c in s.calls)
    for c in s.calls:
        if not c.kw_true("find_unused_parameters"):
            continue
        static = c.kw_true("static_graph") or set_static
        facts = context_facts(ctx, find_unused_parameters=True, static_graph=static,
                              **({"engine": "ddp"} if c.last in _DDP else {}))
        rule = "find-unused-vs-static-graph" if static else "find-unused-cost"
        detail = "find_unused_parameters=True with static_graph" if static else "find_unused_parameters=True"
        out += check_rule(rule, facts, **s.where(c, detail))
    return out


def _is_compile(s: ScriptFile, c: Call) -> bool:
    if c.name in ("torch.compile", "torch._dynamo.optimize") or c.kw_true("compile"):
        return True
    base = c.name.rsplit(".", 1)[0] if "." in c.name else ""
    return bool(c.last == "compile" and base and base.split(".")[0] not in s.modules)


def _compile(s: ScriptFile, ctx: Context) -> list[Finding]:
    first = next((c for c in s.calls if _is_compile(s, c)), None)
    if first is None:
        return []
    facts = context_facts(ctx, compile=True)
    where = s.where(first, f"{first.name}(...) compiles the model")
    return check_rule("deepspeed-compile", facts, **where) + check_rule("xpu-multinode-compile", facts, **where)


def _empty_cache(s: ScriptFile, ctx: Context) -> list[Finding]:
    loop_scopes = {c.last for c in s.calls if c.in_loop}
    out = []
    for c in s.find("empty_cache"):
        if c.name.startswith("torch.cuda.") or not (c.in_loop or c.scope in loop_scopes):
            continue
        extra = {"device": "xpu"} if c.name.startswith("torch.xpu.") else {}
        if "fsdp2" in s.engines():  # the loop may run the FSDP model, whatever other engine is also there
            extra["engine"] = "fsdp2"
        out += check_rule("xpu-empty-cache-fsdp", context_facts(ctx, calls_empty_cache=True, **extra),
                          **s.where(c, f"{c.name}() inside the training loop"))
    return out


def _worker_loader_lines(s: ScriptFile, scope: str) -> list[int]:
    lines = []
    for c in s.find("DataLoader"):
        workers = c.kwarg("num_workers")
        if c.scope == scope and workers is not None and not (isinstance(workers, ast.Constant) and workers.value == 0):
            lines.append(c.line)
    return lines


def _loader_after_mesh(s: ScriptFile, ctx: Context) -> list[Finding]:
    out = []
    for mesh in s.find(*_MESH):
        late = [n for n in _worker_loader_lines(s, mesh.scope) if n > mesh.line]
        late += [c.line for c in s.calls if c.scope == mesh.scope and c.line > mesh.line and "." not in c.name
                 and _worker_loader_lines(s, c.name)]
        if late:
            first = min(late)
            out += check_rule("dataloader-workers-after-mesh", context_facts(ctx, workers_after_mesh=True),
                              file=str(s.path), line=first,
                              detail=f"a DataLoader with workers is created after the device mesh (line {mesh.line})")
            break
    return out


def _one_element(s: ScriptFile, node: ast.expr, scope: str, line: int) -> bool:
    """A 1-element fp32 tensor: torch.ones(1), torch.tensor([1.0]), or a name bound to one."""
    if isinstance(node, ast.Name):
        bound = [v for n, v in s.assigns.get((scope, node.id), []) if n <= line]
        return bool(bound) and _one_element(s, bound[-1], scope, line)
    if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Attribute, ast.Name)):
        return False
    fn = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
    if fn not in _CTORS or not node.args:
        return False
    dtype = next((k.value for k in node.keywords if k.arg == "dtype"), None)
    first = node.args[0]
    if fn == "tensor":
        items = first.elts if isinstance(first, (ast.List, ast.Tuple)) else [first]
        floaty = any(isinstance(i, ast.Constant) and isinstance(i.value, float) for i in items)
        return len(items) == 1 and (_is_fp32(dtype) if dtype is not None else floaty)
    size = first.elts if isinstance(first, (ast.List, ast.Tuple)) else node.args[: 1 if fn == "full" else None]
    one = len(size) == 1 and isinstance(size[0], ast.Constant) and size[0].value == 1
    return one and (dtype is None or _is_fp32(dtype))


def _is_fp32(dtype: ast.expr) -> bool:
    return isinstance(dtype, ast.Attribute) and dtype.attr in _FP32


def _one_element_probe(s: ScriptFile, ctx: Context) -> list[Finding]:
    out = []
    for c in s.find("all_reduce"):
        if c.node.args and _one_element(s, c.node.args[0], c.scope, c.line):
            out += check_rule("allreduce-one-element-probe", {"one_element_fp32_allreduce": (True,)},
                              **s.where(c, "all_reduce of a 1-element fp32 tensor"))
    return out


def _root_only_wrap(s: ScriptFile, ctx: Context) -> list[Finding]:
    fsdp2 = s.find("fully_shard")
    fsdp1 = [c for c in s.calls if c.last in _FSDP1]
    out = []
    for calls, per_block in ((fsdp2, lambda c: c.in_loop), (fsdp1, lambda c: c.kwarg("auto_wrap_policy") is not None)):
        if len(calls) == 1 and not per_block(calls[0]):
            out += check_rule("fsdp-root-only-wrap", {"engine": ("fsdp2",), "root_only_wrap": (True,)},
                              **s.where(calls[0], f"{calls[0].last}() is applied once, to the root module only"))
    return out
