"""Build and verify fixture terms (instructor only; not shipped to students)."""

import shutil
from pathlib import Path

import torch

from harness.catalogue import CATALOGUE, Spec
from harness.checks import CHECKS, checks_for
from harness.contract import ADAPTERS
from harness.runtime import Adapters
from harness.store import HIDDEN, Case, Term, write_term

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
    grads = [n for n in adapter.float_args if n in generated] if spec.check == "output" else []
    case = spec.case(generated, inputs, grads)
    tensors = {f"in/{n}": generated[n] for n in inputs}
    fn = getattr(reference, spec.function)
    kwargs = {**case.args, **{n: t.clone().requires_grad_(n in grads) for n, t in generated.items()}}
    if spec.check == "raises":
        try:
            fn(**kwargs)
        except Exception:
            return case, tensors
        raise AssertionError(f"catalogue case {case.id} should raise, but the reference returned")
    out = fn(**kwargs)
    tensors["out"] = out.detach()
    if grads:
        g = torch.Generator().manual_seed(seed + len(case.id))
        cot = torch.randn(out.shape, generator=g, dtype=out.dtype)
        for name, grad in zip(grads, torch.autograd.grad(out, [kwargs[n] for n in grads], cot)):
            tensors[f"grad/{name}"] = grad
        tensors["cot"] = cot
    return case, tensors


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
