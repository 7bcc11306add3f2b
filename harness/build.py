"""Build and verify fixture terms (instructor only; not shipped to students)."""

import shutil
import zlib
from pathlib import Path

import torch

from harness.catalogue import CATALOGUE, Spec
from harness.checks import CHECKS, checks_for
from harness.contract import ADAPTERS
from harness.runtime import Adapters
from harness.store import HIDDEN, Case, Term, flatten, write_term

REFERENCE = "reference.adapters"


def build_term(project: Path, name: str, seed: int, force: bool = False) -> Path:
    folder = project / "fixtures" / name
    if folder.exists():
        if not force:
            raise FileExistsError(f"{folder} exists; pass --force to rebuild term {name!r}")
        shutil.rmtree(folder)
    reference = Adapters(REFERENCE)
    built = [_build_case(reference, spec, seed) for spec in CATALOGUE]
    public = [(c, t) for c, t in built if not c.hidden]
    hidden = [(c, t) for c, t in built if c.hidden]
    meta = {"term": name, "seed": seed, "torch": torch.__version__,
            "built_by": f"python -m harness term new {name} --seed {seed}"}
    counts: dict[str, int] = {}
    for c, _ in hidden:
        counts[c.function] = counts.get(c.function, 0) + 1
    write_term(folder, {**meta, "hidden_counts": counts}, *_split(public))
    write_term(folder / HIDDEN, meta, *_split(hidden))
    return folder


def _split(built):
    return [c for c, _ in built], {c.id: t for c, t in built}


def _build_case(reference: Adapters, spec: Spec, seed: int) -> tuple[Case, dict]:
    adapter = ADAPTERS[spec.function]
    generated = spec.generate(seed)
    inputs = [n for n in adapter.signature.parameters if n in generated]
    leaves = dict(_leaves(generated))
    # Gradients for float32 cases; half-precision cases test dtype behaviour only.
    float32 = all(t.dtype == torch.float32 for t in leaves.values() if t.is_floating_point())
    grads = [p for p, t in leaves.items() if t.is_floating_point() and p.split("/")[0] in adapter.float_args]
    grads = grads if spec.check == "output" and float32 else []
    case = spec.case(generated, inputs, grads)
    tensors = {}
    for path, t in leaves.items():
        tensors[f"in/{path}"] = t.transpose(-1, -2) if case.views.get(path) else t
    fn = getattr(reference, spec.function)
    if spec.check == "raises":
        try:
            fn(**case.args, **generated)
        except Exception:
            return case, tensors
        raise AssertionError(f"catalogue case {case.id} should raise, but the reference returned")

    # Expected values come from float64 (float32 inputs are widened), so they are the
    # exact answer rounded once, not one float32 implementation's rounding.
    wide = {p: _widen(t).requires_grad_(p in grads) for p, t in leaves.items()}
    out = fn(**case.args, **_assemble(generated, wide))
    if isinstance(out, dict):
        return case, {**tensors, **flatten("out", out)}
    tensors["out"] = _narrow(out.detach())
    if grads:
        g = torch.Generator().manual_seed(seed * 7919 + zlib.crc32(case.id.encode()))
        cot = torch.randn(out.shape, generator=g, dtype=torch.float32)
        for path, grad in zip(grads, torch.autograd.grad(out, [wide[p] for p in grads], cot.to(out.dtype))):
            tensors[f"grad/{path}"] = _narrow(grad)
        tensors["cot"] = cot
    return case, tensors


def _leaves(generated: dict):
    for arg, value in generated.items():
        if isinstance(value, dict):
            yield from ((f"{arg}/{k}", t) for k, t in value.items())
        else:
            yield arg, value


def _assemble(generated: dict, leaves: dict) -> dict:
    """Rebuild keyword arguments from leaf paths (dict arguments from "arg/key")."""
    return {arg: {k: leaves[f"{arg}/{k}"] for k in value} if isinstance(value, dict) else leaves[arg]
            for arg, value in generated.items()}


def _widen(t: torch.Tensor) -> torch.Tensor:
    return t.detach().double() if t.dtype == torch.float32 else t.detach().clone()


def _narrow(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.dtype == torch.float64 else t


def verify_term(project: Path, name: str) -> list[str]:
    """Check hashes and schema, then hold the reference to every check. Returns failures."""
    term = Term(project, name, hidden=True)
    reference = Adapters(REFERENCE)
    failures = []
    for case in term.cases:
        for check in checks_for(case):
            try:
                CHECKS[check](reference, term, case)
            except AssertionError as e:
                failures.append(f"{case.id} [{check}]: {e}")
    return failures
