"""The calls of a training script that set what its memory depends on: the loss kernel,
checkpointing, optimizer and compile readers (precision and wrapping: inputs/script_wrapping.py).

Read statically (inputs/script_file.py read_script: `ast`, nothing imported or run); keyword
values are followed through variables and **kwargs (inputs/py_values.py). What each call
means comes from the library's source, named beside each reader. A reader returns every
candidate it found; inputs/script.py decides between them and says what it could not.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from prism_strategy.inputs.py_values import UNKNOWN, Symbol, Values
from prism_strategy.inputs.script_file import ScriptFile
from prism_strategy.inputs.script_reader import Call

_LOW = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "half": "fp16", "fp16": "fp16"}
_FULL = {"float32": "fp32", "float": "fp32", "fp32": "fp32"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Found:
    value: object
    """What the plan would take: "chunked", "sac", 2 (every 2nd block), "adamw-fused", ..."""
    line: int
    evidence: str
    """The script's line that says so."""
    note: str = ""
    """How that line became the value, or what is uncertain about it."""
    sure: bool = True
    """False: the line sits under an `if` the script leaves open."""


@dataclass(kw_only=True, slots=True)
class Reader:
    s: ScriptFile
    vals: Values
    source: list[str]
    tree: ast.Module

    def runs(self, c: Call) -> bool:
        """False only for a call under an `if` the values decide never runs."""
        return self.vals.conditions(c.conds, c.scope, c.line).taken is not False

    def calls(self, test) -> list[Call]:
        return [c for c in self.s.calls if test(c) and self.runs(c)]

    def text(self, line: int) -> str:
        """The line's code, up to 100 characters ("..." where cut)."""
        code = self.source[line - 1].strip() if 0 < line <= len(self.source) else ""
        return code if len(code) <= 100 else code[:97] + "..."

    def found(self, c: Call, value: object, note: str = "", *, conds: bool = True) -> Found:
        """A candidate from call c; when an `if` the script leaves open decides whether c runs, the
        note says so (conds=False: the reader has read that test itself)."""
        d = self.vals.conditions(c.conds, c.scope, c.line)
        if conds and (d.taken is None or not d.by_default or d.open_env):
            note = "; ".join(
                x.replace("which the doctor cannot decide", "which the script leaves open")
                for x in (note, *d.notes)
                if x
            )
        return Found(value=value, line=c.line, evidence=self.text(c.line), note=note, sure=d.taken is True or not conds)

    def kwarg(self, c: Call, name: str, absent: object = None) -> object:
        """The keyword's value when every path the values allow agrees; UNKNOWN otherwise."""
        got = {repr(a.value): a.value for a in self.s.kwarg_values(c, name, self.vals, absent=absent)}
        return next(iter(got.values())) if len(got) == 1 else UNKNOWN

    def dtype(self, c: Call, name: str) -> str | None:
        """A dtype keyword as "bf16" / "fp16" / "fp32"; None when absent or not readable."""
        node = c.kwarg(name)
        return None if node is None else self.dtype_of(node, c.scope, c.line)

    def dtype_of(self, node: ast.expr, scope: str, line: int) -> str | None:
        if isinstance(node, ast.Attribute):
            return _LOW.get(node.attr) or _FULL.get(node.attr)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return _LOW.get(node.value.lower()) or _FULL.get(node.value.lower())
        if isinstance(node, ast.Name):
            found = [
                a
                for a in self.s.assigns.get((scope, node.id)) or self.s.assigns.get(("<module>", node.id), [])
                if a.value is not None and (a.line < line or scope == "<module>")
            ]
            return self.dtype_of(found[-1].value, scope, found[-1].line) if found else None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):
            return self._dtype_table(node, scope, line)
        return None

    def _dtype_table(self, node: ast.Subscript, scope: str, line: int) -> str | None:
        """`{'float32': torch.float32, 'bfloat16': torch.bfloat16, ...}[dtype]` (nanoGPT's ptdtype):
        the entries every key the script can pick names; one answer when they agree on low
        precision (bf16 and fp16 have the same bytes), None otherwise."""
        table = {k.value: v for k, v in zip(node.value.keys, node.value.values) if isinstance(k, ast.Constant)}  # type: ignore[union-attr]
        keys = self._constants(node.slice, scope, line)
        got = {self.dtype_of(table[k], scope, line) for k in keys if k in table} if keys else {None}
        if None in got or not got or (len(got) > 1 and "fp32" in got):
            return None
        return "bf16" if "bf16" in got else got.pop()

    def _constants(self, node: ast.expr, scope: str, line: int, depth: int = 0) -> set[object] | None:
        """The constants an expression can be: a literal, an `a if c else b` of them, a name bound to one."""
        if depth > 4:
            return None
        if isinstance(node, ast.Constant):
            return {node.value}
        if isinstance(node, ast.IfExp):
            a, b = (self._constants(x, scope, line, depth + 1) for x in (node.body, node.orelse))
            return None if a is None or b is None else a | b
        if isinstance(node, ast.Name):
            found = [
                a
                for a in self.s.assigns.get((scope, node.id)) or self.s.assigns.get(("<module>", node.id), [])
                if a.value is not None and (a.line < line or scope == "<module>")
            ]
            return self._constants(found[-1].value, scope, found[-1].line, depth + 1) if found else None
        return None


def prism_wraps(r: Reader) -> list[Call]:
    """prism_strategy.wrap(model, ...) calls: their keywords are the plan's inputs by name."""
    return r.calls(lambda c: c.last == "wrap" and c.name.startswith("prism_strategy"))


def wrap_reads(r: Reader, key: str, default: object, to_value) -> list[Found]:
    """One candidate per prism wrap(): its `key` (runtime/wrap.py's default when absent) as a plan value."""
    out = []
    for c in prism_wraps(r):
        v = r.kwarg(c, key, default)
        got = to_value(v) if v is not UNKNOWN else None
        out.append(r.found(c, got, f"wrap({key}={v!r})" + ("" if c.kwarg(key) is not None else ", its default")))
    return out


# --- loss ----------------------------------------------------------------------------------
def loss(r: Reader) -> list[Found]:
    """The cross-entropy kernel. Liger's patches replace the HF model's own loss (liger_kernel/
    transformers/monkey_patch.py: apply_liger_kernel_to_<model>(fused_linear_cross_entropy=True,
    cross_entropy=False) by default; AutoLigerKernelForCausalLM applies them; transformers'
    TrainingArguments(use_liger_kernel=True) too), so the model's `.loss` counts only without one."""
    out: list[Found] = []
    for c in r.calls(lambda c: "Liger" in c.name or c.last.startswith("apply_liger_kernel_to_")):
        if c.last == "LigerFusedLinearCrossEntropyLoss" or c.last.startswith("liger_fused_linear_cross_entropy"):
            out.append(r.found(c, "chunked"))
        elif c.last == "LigerCrossEntropyLoss":
            out.append(r.found(c, "fused", "Liger's cross-entropy: low-precision logits, gradient in place"))
        elif c.last.startswith("apply_liger_kernel_to_") or "AutoLigerKernelForCausalLM" in c.name:
            flce, ce = r.kwarg(c, "fused_linear_cross_entropy", True), r.kwarg(c, "cross_entropy", False)
            if flce is True:
                out.append(r.found(c, "chunked", "Liger's patch: fused linear cross-entropy (its default)"))
            elif ce is True:
                out.append(r.found(c, "fused", "Liger's patch with cross_entropy=True"))
    for c in r.calls(lambda c: c.last == "TrainingArguments"):
        if r.kwarg(c, "use_liger_kernel", False) is True:
            out.append(r.found(c, "chunked", "TrainingArguments(use_liger_kernel=True) applies Liger's defaults"))
    for c in r.calls(lambda c: c.last == "CrossEntropyLoss" and "flash_attn" in c.name):
        out.append(r.found(c, "fused", "flash-attn's CrossEntropyLoss (flash_attn/losses/cross_entropy.py)"))
    out += [
        f
        for f in wrap_reads(r, "loss", None, lambda v: v if v in ("upcast", "fused", "chunked") else None)
        if f.value not in ("upcast", None)
    ]  # wrap's upcast is the model's own loss, whatever kernel that is
    for c in r.calls(_chunked_ce):
        out.append(r.found(c, "chunked", f"{c.last}: a chunked cross-entropy (as torchtune's CEWithChunkedOutputLoss)"))
    if out and all(f.sure for f in out):
        return out
    explicit = []
    for c in r.calls(lambda c: c.name in ("torch.nn.functional.cross_entropy", "torch.nn.CrossEntropyLoss")):
        upcast = any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "float"
            for a in c.node.args[:1]
            for n in ast.walk(a)
        )
        explicit.append(
            r.found(
                c,
                "upcast",
                ""
                if upcast
                else "the logits' dtype is not read: fp32 under autocast (its fp32 list has log_softmax, "
                "torch include/ATen/autocast_mode.h); bf16 logits outside autocast keep bf16 "
                "log-probs, nearer --loss fused",
            )
        )
    return out + (explicit or _model_loss(r)[:1])  # a patch that may not run leaves the other kernel a candidate


def _model_loss(r: Reader) -> list[Found]:
    """The model's own loss where a line reads it; a call on that line carries its `if` tests."""
    out = []
    for n in _model_loss_lines(r):
        on_line = [c for c in r.s.calls if c.line == n]
        if on_line and not any(r.runs(c) for c in on_line):
            continue
        note = "the HF model's own loss (transformers' ForCausalLMLoss casts the logits to fp32)"
        out.append(
            r.found(on_line[0], "upcast", note)
            if on_line
            else Found(value="upcast", line=n, evidence=r.text(n), note=note)
        )
    return out


def _chunked_ce(c: Call) -> bool:
    """A chunked cross-entropy by its name: torchtune's CEWithChunkedOutputLoss, chunked_cross_entropy, ..."""
    low = c.last.lower()
    return "chunk" in low and ("entropy" in low or "CE" in c.last or re.search(r"(^|_)ce(_|$)", low) is not None)


_NOT_OUTPUTS = {"self", "args", "cfg", "config", "opts", "hparams", "metrics"}
"""Objects whose `.loss` is a setting or a record, not a model's output."""


def _model_loss_lines(r: Reader) -> list[int]:
    """`outputs.loss` / `out["loss"]` (a causal LM called with labels returns its own loss), or
    an HF Trainer, which trains on the model's own loss."""
    lines = [c.line for c in r.calls(lambda c: c.last in ("Trainer", "SFTTrainer", "Seq2SeqTrainer"))]
    for node in ast.walk(r.tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "loss"
            and isinstance(node.ctx, ast.Load)
            and not (isinstance(node.value, ast.Name) and node.value.id in _NOT_OUTPUTS)
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "loss":
            lines.append(node.lineno)
    return sorted(lines)


# --- activation checkpointing ------------------------------------------------------------------
_FULL_CKPT = {
    "checkpoint_wrapper",
    "ptd_checkpoint_wrapper",
    "apply_activation_checkpointing",
    "gradient_checkpointing_enable",
    "activation_checkpointing_enable",
}


def ckpt(r: Reader) -> list[Found]:
    """sac: create_selective_checkpoint_contexts (torch/utils/checkpoint.py), the per-op policy
    torchtitan passes as checkpoint_wrapper's context_fn. full: checkpoint_wrapper /
    apply_activation_checkpointing (torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py),
    torch.utils.checkpoint.checkpoint, HF's gradient_checkpointing_enable (every decoder layer) or
    TrainingArguments(gradient_checkpointing=True); every k-th block when a test `i % k` picks them."""
    sac_fn = "create_selective_checkpoint_contexts"
    sac = r.calls(lambda c: c.last == sac_fn or _mentions(c, sac_fn))
    if sac:
        return [
            r.found(
                sac[0],
                "sac",
                "a per-op selective policy, planned as torchtitan's (save matmul, attention "
                "and reduction outputs, recompute every second matmul); the script's own may keep more or less",
            )
        ]
    out = []
    for c in r.calls(
        lambda c: (
            c.last in _FULL_CKPT
            or c.name == "torch.utils.checkpoint.checkpoint"
            or c.name == "deepspeed.checkpointing.checkpoint"
        )
    ):
        k = _every_kth(r, c)
        out.append(
            r.found(c, k or 1, f"a test `% {k}` picks one block in {k}" if k else "every block", conds=k is None)
        )
    out += wrap_reads(r, "ckpt_freq", 0, lambda v: v if v == "sac" or (isinstance(v, int) and v >= 0) else None)
    for c in r.calls(lambda c: c.last == "TrainingArguments"):
        if True in (r.kwarg(c, "gradient_checkpointing", False), r.kwarg(c, "activation_checkpointing", False)):
            out.append(r.found(c, 1, "TrainingArguments(gradient_checkpointing=True): every decoder layer"))
    return out


def _mentions(c: Call, name: str) -> bool:
    """The call passes `name` itself (functools.partial(create_selective_checkpoint_contexts, policy))."""
    return any(
        isinstance(n, ast.Name) and n.id == name or isinstance(n, ast.Attribute) and n.attr == name
        for a in (*c.node.args, *(k.value for k in c.node.keywords))
        for n in ast.walk(a)
    )


def _every_kth(r: Reader, c: Call) -> int | None:
    """k from a `x % k` test above the call or in its check_fn (a lambda or a function of the script)."""
    exprs: list[ast.AST] = [t for t, _ in c.conds]
    fn = c.kwarg("check_fn") or c.kwarg("auto_wrap_policy")
    if isinstance(fn, ast.Lambda):
        exprs.append(fn.body)
    elif isinstance(fn, ast.Name):
        exprs += _function_tests(r, fn.id)
    for e in exprs:
        for n in ast.walk(e):
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
                k = {a.value for a in r.vals.eval(n.right, c.scope, c.line)}
                if len(k) == 1 and isinstance(v := k.pop(), int) and not isinstance(v, bool) and v > 1:
                    return v
    return None


def _function_tests(r: Reader, name: str) -> list[ast.AST]:
    return [n for f in ast.walk(r.tree) if isinstance(f, ast.FunctionDef) and f.name == name for n in f.body]


# --- optimizer -------------------------------------------------------------------------------
def optimizer(r: Reader) -> list[Found]:
    """torch.optim.AdamW/Adam: fused=True -> fused, foreach=True -> foreach, foreach=False -> the
    per-tensor loop, neither -> torch's default (torch/optim/optimizer.py _default_to_fused_or_foreach).
    transformers' TrainingArguments(optim=...): adamw_torch_fused (its default from torch 2.8 on,
    transformers 5.24 training_args.py) -> fused, adamw_torch -> torch's default."""
    out = []
    for c in r.calls(lambda c: c.name in ("torch.optim.AdamW", "torch.optim.Adam", "torch.optim.SGD")):
        if c.last == "SGD":
            out.append(r.found(c, "sgd"))
            continue
        fused, foreach = r.kwarg(c, "fused"), r.kwarg(c, "foreach")
        if UNKNOWN in (fused, foreach) or isinstance(fused, Symbol) or isinstance(foreach, Symbol):
            out.append(
                Found(
                    value=None,
                    line=c.line,
                    evidence=r.text(c.line),
                    note="its fused/foreach keywords are not values the script fixes",
                )
            )
            continue
        impl = "fused" if fused else "foreach" if foreach else "loop" if foreach is False else ""
        note = "Adam planned as AdamW (the same state and step)" if c.last == "Adam" else ""
        out.append(
            r.found(
                c,
                f"adamw-{impl}" if impl else "adamw",
                note
                or ("" if impl else "torch's default implementation: foreach on cuda/xpu, the per-tensor loop on cpu"),
            )
        )
    if out:  # an optimizer the script builds is the one Trainer(optimizers=...) runs, whatever args.optim says
        return out
    for c in r.calls(lambda c: c.last == "TrainingArguments"):
        optim = r.kwarg(c, "optim", "adamw_torch_fused")
        if optim in ("adamw_torch_fused", "adamw_torch"):
            default = (
                ""
                if c.kwarg("optim") is not None
                else (
                    "TrainingArguments' default optim: adamw_torch_fused with torch >= 2.8 (transformers 5.24 "
                    "training_args.py; older transformers: adamw_torch)"
                )
            )
            out.append(r.found(c, "adamw-fused" if optim == "adamw_torch_fused" else "adamw", default))
    return out


# --- compile ---------------------------------------------------------------------------------
def compile_(r: Reader) -> list[Found]:
    """torch.compile (or a module's .compile()), TrainingArguments(torch_compile=True)."""
    out = [
        r.found(c, True)
        for c in r.calls(
            lambda c: (
                c.name in ("torch.compile", "torch._dynamo.optimize")
                or (c.last == "compile" and "." in c.name and c.name.split(".")[0] not in r.s.modules)
            )
        )
    ]
    out += [
        r.found(c, True)
        for c in r.calls(lambda c: c.last == "TrainingArguments")
        if r.kwarg(c, "torch_compile", False) is True
    ]
    return out + [
        f
        for f in wrap_reads(r, "compile", False, lambda v: v if isinstance(v, bool) else None)
        if f.value is not False or not out
    ]
