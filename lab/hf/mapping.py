"""A family's export mapping (`to_hf`) run backwards, tensor by tensor, in bounded memory.

The mappings are pure rearrangements of the lab model's parameters (split, transpose, reorder, stack; constant
zeros where lab has no parameter). `trace` runs `to_hf` once on a model whose parameters are meta tensors (no
memory): a Hugging Face tensor that is a view of one parameter (most are: embeddings, norms, split or transposed
projections) is that view's shape, strides and offset into it. The rest (reordered rows: Llama's rotary halves,
Marian's sinusoid order) are traced by number: `to_hf` again with one parameter at a time holding its element
numbers 1, 2, 3, ... (the others stay meta), so each such tensor element names the element it comes from (0: a
constant zero). `fill` then reads the file's tensors one at a time and writes each into its parameter. Two checks
keep an import from being silently wrong: where lab writes a constant zero the file must hold zeros, and where lab
writes one parameter under two names (tied embeddings) the file's two copies must be equal."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from lab.errors import LabError
from lab.hf.family import Family


@dataclass(frozen=True)
class Source:
    """Where one Hugging Face tensor's elements are in the lab model."""

    shape: tuple[int, ...]
    param: str  # the lab parameter ("": a constant zero tensor, e.g. a bias lab's layout lacks)
    view: tuple | None = None  # (shape, stride, offset) into the parameter, when the tensor is a view of it
    numbered: bool = False  # else traced by number (Plan.numbers): 1 + the parameter element's index, 0: a zero


@dataclass
class Plan:
    """The Source of every Hugging Face tensor, and the meta model they were traced on: a parameter's numbered
    tensors are traced again when they are read (held for one parameter at a time, not for the model)."""

    sources: dict[str, Source]
    model: nn.Module
    family: Family

    def numbers(self, param: str) -> dict[str, torch.Tensor]:
        """The numbered tensors of one parameter: per element 1 + its flat index in param, 0: a constant zero."""
        numbered = {k for k, s in self.sources.items() if s.param == param and s.numbered}
        out = _numbered(self.model, self.family, dict(self.model.named_parameters())[param])
        return {k: t for k, t in out.items() if k in numbered}


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Build a model whose parameters are meta tensors (no memory, no initialisation cost) and whose buffers are
    computed as usual (rotary and sinusoidal tables): accelerate's init_empty_weights(include_buffers=False)."""
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and not param.is_meta:  # a tied parameter is registered again as it is
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def _holders(model: nn.Module, param: nn.Parameter) -> list[tuple[nn.Module, str]]:
    return [(m, n) for m in model.modules() for n, q in m._parameters.items() if q is param]


def materialise(model: nn.Module, dtype: torch.dtype | None = None) -> None:
    """Give each meta parameter uninitialised memory of dtype, or of its own (tied ones stay one tensor)."""
    for _, p in list(model.named_parameters()):
        if p.is_meta:
            real = nn.Parameter(torch.empty(p.shape, dtype=dtype or p.dtype), requires_grad=p.requires_grad)
            for m, n in _holders(model, p):
                setattr(m, n, real)


def trace(model: nn.Module, family: Family) -> Plan:
    """Each Hugging Face tensor's Source, for a model whose parameters are meta tensors (kept meta: the plan
    traces numbered tensors on it again)."""
    params = dict(model.named_parameters())  # a tied parameter under its first name
    name_of = {id(p): n for n, p in params.items()}
    with torch.no_grad():
        _, out = family.to_hf(model, {})
    plan, pending, covered, geometries = {}, set(), dict.fromkeys(params, 0), set()
    for k, t in out.items():
        base = t if isinstance(t, nn.Parameter) else t._base
        if base is not None and id(base) in name_of:
            n, view = name_of[id(base)], (tuple(t.shape), t.stride(), t.storage_offset())
            plan[k] = Source(tuple(t.shape), n, view=view)
            if (n, view) not in geometries:  # a tied tensor written twice covers its elements once
                geometries.add((n, view))
                covered[n] += t.numel()
        elif not t.is_meta:  # made by the mapping, not taken from a parameter
            plan[k] = Source(tuple(t.shape), "")
        else:
            pending.add(k)
    # the parameters the views leave partly uncovered first: the rest only while tensors are unaccounted for
    order = sorted(params, key=lambda n: covered[n] >= params[n].numel())
    for n in order:
        if not pending:
            break
        for k, numbers in _numbered(model, family, params[n]).items():
            if k in pending:
                plan[k], pending = Source(tuple(numbers.shape), n, numbered=True), pending - {k}
    if pending:
        raise RuntimeError(f"{family.hf_class}.to_hf: {', '.join(sorted(pending)[:3])} come from no single lab parameter")
    return Plan(plan, model, family)


def _numbered(model: nn.Module, family: Family, param: nn.Parameter) -> dict[str, torch.Tensor]:
    """to_hf's tensors with param holding its element numbers (1, 2, ...; exact up to 2^53) and every other
    parameter meta: those that hold a number come from param."""
    numbers = nn.Parameter(torch.arange(1, param.numel() + 1, dtype=torch.float64).view(param.shape), requires_grad=False)
    holders = _holders(model, param)
    for m, n in holders:
        setattr(m, n, numbers)
    try:
        with torch.no_grad():
            _, out = family.to_hf(model, {})
    finally:
        for m, n in holders:
            setattr(m, n, param)
    return {k: t.long() for k, t in out.items() if not t.is_meta and t.any()}


def shape_of(state: Mapping, name: str) -> tuple[int, ...]:
    """A file tensor's shape, unread where the mapping can say it without reading (lab.hf.weights.Weights)."""
    for m in getattr(state, "maps", [state]):  # a family's fold: a ChainMap over the file
        if name in m:
            return m.shape(name) if hasattr(m, "shape") and callable(m.shape) else tuple(m[name].shape)
    raise KeyError(name)


def fill(params: dict[str, torch.Tensor], plan: Plan, state: Mapping[str, torch.Tensor], source: str,
         wanted: set[str]) -> None:
    """Write the file's tensors (state, read one at a time) into params (name -> contiguous tensor, the traced
    model's names) for the parameters in wanted, parameter by parameter. One LabError when a tensor has another
    shape than the plan's or a wanted parameter's elements are not all in the file (checked before anything is
    written), when the file holds non-zero values where lab has no parameter, or two different copies of one lab
    parameter."""
    present = {k: s for k, s in plan.sources.items() if k in state and (s.param in wanted or not s.param)}
    shapes = [f"{k}: file {shape_of(state, k)} vs lab {s.shape}" for k, s in present.items() if shape_of(state, k) != s.shape]
    if shapes:
        raise LabError(f"{source}: tensors of other shapes than its config.json says: {'; '.join(shapes[:3])}")
    groups: dict[str, dict[str, Source]] = {}
    for k, s in present.items():
        groups.setdefault(s.param, {})[k] = s
    missing = sorted(n for n in wanted if not _covered(params[n], groups.get(n, {}), plan))
    if missing:
        absent = sorted(k for k, s in plan.sources.items() if s.param in missing and k not in state)
        raise LabError(f"{source}: model.safetensors lacks {', '.join(absent[:4]) or 'tensors'} for lab's "
                       f"{', '.join(missing[:4])}")
    for k in groups.pop("", {}):
        if state[k].any():
            raise _zeros(source, k)
    with torch.no_grad():
        for n, sources in groups.items():
            param = params[n]
            flat, numbers = param.view(-1), plan.numbers(n) if any(s.numbered for s in sources.values()) else {}
            written = torch.zeros(param.numel(), dtype=torch.bool) if numbers else None  # the elements written
            views = set()
            for k, s in sources.items():
                t = state[k].reshape(-1)
                if s.numbered:
                    at = numbers[k].reshape(-1)
                    if t[at == 0].any():
                        raise _zeros(source, k)
                    _write(flat, at[at > 0] - 1, t[at > 0], written, source, k)
                elif written is not None:
                    _write(flat, torch.arange(param.numel()).view(param.shape).as_strided(*s.view).reshape(-1), t, written,
                           source, k)
                elif s.view in views:  # a tied parameter's second name
                    if not torch.equal(param.as_strided(*s.view).reshape(-1), t.to(param.dtype)):
                        raise _copies(source, k)
                else:
                    param.as_strided(*s.view).copy_(t.view(s.shape))
                    views.add(s.view)


def _covered(param: torch.Tensor, sources: dict[str, Source], plan: Plan) -> bool:
    """Whether the file's tensors (sources) hold every element of param."""
    if not any(s.numbered for s in sources.values()):  # views: distinct ones do not overlap
        return sum(_numel(shape) for shape, _, _ in {s.view for s in sources.values()}) >= param.numel()
    mask, numbers = torch.zeros(param.numel(), dtype=torch.bool), plan.numbers(sources[next(iter(sources))].param)
    for k, s in sources.items():
        if s.numbered:
            mask[numbers[k][numbers[k] > 0] - 1] = True
        else:
            mask.view(param.shape).as_strided(*s.view).fill_(True)
    return bool(mask.all())


def _numel(shape: tuple[int, ...]) -> int:
    return int(torch.Size(shape).numel())


def _write(flat: torch.Tensor, at: torch.Tensor, values: torch.Tensor, written: torch.Tensor, source: str, k: str) -> None:
    """flat[at] = values, where an element written before must get the value it has (a tied copy)."""
    values = values.to(flat.dtype)
    again = written[at]
    if again.any() and not torch.equal(flat[at[again]], values[again]):
        raise _copies(source, k)
    flat[at] = values
    written[at] = True


def _zeros(source: str, k: str) -> LabError:
    return LabError(f"{source}: {k} holds non-zero values where lab's model has no parameter (e.g. a bias lab's "
                    "layout lacks); lab cannot reproduce this model exactly")


def _copies(source: str, k: str) -> LabError:
    return LabError(f"{source}: {k} differs from another tensor lab keeps as one parameter (tied embeddings); set "
                    "tie_word_embeddings=false in its config.json if they are separate")
