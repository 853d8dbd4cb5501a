"""The collective libraries (nccl, rccl, oneccl, gloo) as one registry: each library's facts live
once, in data/libraries/<name>.toml, and every room reads them here: torch's backend name (on
ROCm it is "nccl" while the library is rccl), the device type, the environment prefixes the
library and its transport read (recorded with runs, checked by the doctor), the variables its
cost model reads with their defaults, and the launch facts (the visible-devices variable, the
network plugin). The cost models live in estimate/backends/<same name>.py.

This is the one module that names the prefixes and backend names (tests/unit/specs/
test_library_registry.py). Adding a library: one data file here, one cost model there, and its
name in `LibraryName`.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from importlib import resources
from typing import Literal, get_args

import tomllib

from prism_strategy.specs.errors import SpecError

LibraryName = Literal["nccl", "rccl", "oneccl", "gloo"]
"""The registered libraries (one data/libraries/<name>.toml each), in registry order."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveLibrary:
    """One collective library, as data/libraries/<name>.toml states it (each fact with a source)."""

    name: str
    """The library: what a platform's `collective_library` names and estimate/backends keys on."""
    description: str
    torch_backend: str
    """The name torch.distributed.init_process_group takes for it."""
    torch_aliases: tuple[str, ...] = ()
    """Other names torch (or an extension) registered for the same backend (torch-ccl's "ccl")."""
    device: str
    """The torch device type its ranks run on ("cuda" on ROCm too: HIP reuses torch.cuda)."""
    default_for_backend: bool
    """The library a platform file's `backend = "<torch name>"` means (nccl for "nccl")."""
    env_prefixes: tuple[str, ...]
    """Prefixes of the library's own variables (NCCL_ for NCCL and RCCL)."""
    transport_prefixes: tuple[str, ...] = ()
    """Prefixes of its network transport's variables (libfabric's FI_)."""
    torch_prefixes: tuple[str, ...] = ()
    """Prefixes of torch's wrapper of it (TORCH_NCCL_) or, for gloo, of gloo's own variables."""
    runtime_prefixes: tuple[str, ...] = ()
    """Prefixes of the device runtime under it (Level Zero ZE_, ROCm HIP_/ROCR_/HSA_)."""
    visible_devices: str = ""
    """The variable that limits which devices a rank sees."""
    other_visible_devices: tuple[str, ...] = ()
    """Variables that select among what `visible_devices` left (HIP_VISIBLE_DEVICES on ROCm)."""
    model_variables: dict[str, str] = dataclasses.field(default_factory=dict)
    """The variables its cost model reads, with what an unset one means."""
    net_plugin: str = ""
    """The network plugin a Slingshot/OFI node needs (aws-ofi-rccl's librccl-net.so), "" if none."""
    net_plugin_repo: str = ""
    sources: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def read_prefixes(self) -> tuple[str, ...]:
        """Every prefix the library and its transport read."""
        return (*self.env_prefixes, *self.transport_prefixes)


def _load(name: str) -> CollectiveLibrary:
    path = resources.files("prism_strategy") / "data" / "libraries" / f"{name}.toml"
    raw = tomllib.loads(path.read_text())
    fields = {f.name for f in dataclasses.fields(CollectiveLibrary)}
    unknown = sorted(set(raw) - fields)
    if unknown or raw.get("name") != name:
        raise SpecError(f"data/libraries/{name}.toml: unknown keys {unknown} or name {raw.get('name')!r} != file name")
    tuples = {k: tuple(v) for k, v in raw.items() if isinstance(v, list)}
    return CollectiveLibrary(**(raw | tuples))


@cache
def libraries() -> tuple[CollectiveLibrary, ...]:
    return tuple(_load(n) for n in get_args(LibraryName))


def library(name: str) -> CollectiveLibrary:
    """The library by name; an unknown name is a SpecError listing the registered ones."""
    for lib in libraries():
        if lib.name == name:
            return lib
    raise SpecError(f"no collective library {name!r}; one of {', '.join(get_args(LibraryName))}")


def library_of_backend(torch_backend: str) -> CollectiveLibrary:
    """The library a torch backend name means by default (a platform file's `backend = "nccl"`
    is NCCL; a ROCm platform names `collective_library = "rccl"`)."""
    for lib in libraries():
        if lib.default_for_backend and torch_backend in (lib.torch_backend, *lib.torch_aliases):
            return lib
    raise SpecError(f"no collective library for torch backend {torch_backend!r}; one of {', '.join(backend_names())}")


def library_of_device(device: str) -> CollectiveLibrary:
    """The default library of a torch device type (xpu: oneccl, cuda: nccl, cpu: gloo)."""
    for lib in libraries():
        if lib.default_for_backend and lib.device == device:
            return lib
    raise SpecError(f"no collective library for device {device!r}; one of {', '.join(device_names())}")


def backend_names() -> tuple[str, ...]:
    """torch's backend names, each once, in registry order."""
    return tuple(dict.fromkeys(lib.torch_backend for lib in libraries()))


def device_names() -> tuple[str, ...]:
    return tuple(dict.fromkeys(lib.device for lib in libraries() if lib.default_for_backend))


def _union(attr: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for lib in libraries() for p in getattr(lib, attr)))


def collective_prefixes() -> tuple[str, ...]:
    """Every library's and transport's variable prefixes (CCL_, NCCL_, FI_): the variables
    recorded with a run and read into a Scenario's environment."""
    return tuple(dict.fromkeys((*_union("env_prefixes"), *_union("transport_prefixes"))))


def torch_prefixes() -> tuple[str, ...]:
    return _union("torch_prefixes")


def runtime_prefixes() -> tuple[str, ...]:
    return _union("runtime_prefixes")


def read_by(torch_backend: str) -> tuple[str, ...] | None:
    """The prefixes the default library of a torch backend reads (None: a backend not registered)."""
    try:
        return library_of_backend(torch_backend).read_prefixes
    except SpecError:
        return None


def own_prefix(name: str) -> str:
    """The first of a library's own prefixes ("" for gloo): a profile belongs to the library when
    it sets a variable with it."""
    lib = library(name)
    return lib.env_prefixes[0] if lib.env_prefixes else ""


def device_of_variable(name: str) -> str:
    """The device type a launcher's exported variable points to ("" when none): a library's own
    prefix or its runtime's (NCCL_ is shared by nccl and rccl, both "cuda" to torch)."""
    for lib in libraries():
        if lib.device != "cpu" and name.startswith((*lib.env_prefixes, *lib.runtime_prefixes)):
            return lib.device
    return ""
