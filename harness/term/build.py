"""Build and verify fixture terms (instructor only; not shipped to students)."""

import dataclasses
import json
import secrets
import shutil
import zlib
from pathlib import Path

import torch

from harness.term.case_rules import problems
from harness.term.catalogue import CATALOGUE, Spec, twin
from harness.student_run.diagnose import fingerprint
from harness.student_run.checks import CHECKS
from harness.store import checks_for
from harness.term.coverage import depends_on
from harness.contract import ADAPTERS
from harness.runtime import Adapters
from harness.paths import assemble, leaves
from harness.store import HIDDEN, MANIFEST, Case, Term, covered, flatten, swap_view, write_term
from harness.torch_imports import optimizers_without_dynamo
from reference.variants import VARIANTS, spying

REFERENCE = "reference.adapters"


def build_term(project: Path, name: str, seed: int, force: bool = False, skip_unreached: bool = True,
               grading_seed: int | None = None) -> Path:
    """Build term `name` from the catalogue. Public cases draw their values from `seed`, which
    the public manifest records; hidden cases and twins from `grading_seed`, recorded only in
    the hidden manifest: with the catalogue and the public seed a student still cannot make
    the hidden values. By default a rebuild keeps the term's grading seed, and a new term
    draws one at random. `skip_unreached=False` runs every known mistake on every public
    case, even where it cannot differ (the selftest's proof that skipping changes no byte)."""
    folder = project / "fixtures" / name
    if folder.exists() and not force:
        raise FileExistsError(f"{folder} exists; pass --force to rebuild term {name!r}")
    broken = problems(CATALOGUE)
    if broken:  # before minutes of building, and before the old term is removed
        raise ValueError("the catalogue breaks its rules (harness/term/case_rules.py):\n  " + "\n  ".join(broken))
    if grading_seed is None:
        grading_seed = _kept_grading_seed(folder)
    if folder.exists():
        shutil.rmtree(folder)
    reference = Adapters(REFERENCE)
    mistakes = [v for v in VARIANTS.values() if not v.correct]
    public = tuple(spec for spec in CATALOGUE if not spec.hidden)
    specs = CATALOGUE + [twin(spec, grading_seed, public) for spec in public]
    optimizers_without_dynamo()  # building an optimizer would import torch._dynamo: seconds, for nothing here
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tensors are tiny: on a busy 2-core machine a second thread cost 5x the CPU
    try:
        built = [_build_case(reference, spec, grading_seed if spec.hidden else seed, mistakes, skip_unreached)
                 for spec in specs]
    finally:
        torch.set_num_threads(threads)
    public = [(c, t) for c, t in built if not c.hidden]
    hidden = [(c, t) for c, t in built if c.hidden]
    meta = {"term": name, "seed": seed, "torch": torch.__version__,
            "built_by": f"python -m harness term new {name} --seed {seed}"}
    counts: dict[str, int] = {}
    scored: dict[str, int] = {}  # the progress table's share of points that hidden cases hold
    for c, _ in hidden:
        counts[c.function] = counts.get(c.function, 0) + 1
        if not c.twin_of:
            scored[c.function] = scored.get(c.function, 0) + len(checks_for(c))
    hints = {v.name: v.hint for v in mistakes if v.hint}
    hidden_tests = {f: sum(len(checks_for(c)) for c, _ in hidden if c.function == f) for f in counts}
    functions = covered([c for c, _ in public], hidden_tests)  # its points stay its own (Term.functions)
    uses = {f: sorted(used & set(functions), key=list(functions).index) for f, used in depends_on().items()
            if f in functions and used & set(functions)}  # the student run's "fix X first" (a cascade)
    write_term(folder, {**meta, "hidden_counts": counts, "scored_hidden": scored, "functions": functions,
                        "uses": uses, "hints": hints}, *_split(public))
    write_term(folder / HIDDEN, {**meta, "grading_seed": grading_seed,
                                 "built_by": f"{meta['built_by']} --grading-seed {grading_seed}"}, *_split(hidden))
    return folder


def _kept_grading_seed(folder: Path) -> int:
    """The grading seed of the term being rebuilt, or a fresh random one."""
    try:
        return int(json.loads((folder / HIDDEN / MANIFEST).read_text())["grading_seed"])
    except (OSError, ValueError, KeyError, TypeError):
        return secrets.randbits(40)  # a brute force of the seed from leaked bits costs 2^40 term builds


def _split(built):
    return [c for c, _ in built], {c.id: t for c, t in built}


def _build_case(reference: Adapters, spec: Spec, seed: int, mistakes: list,
                skip_unreached: bool) -> tuple[Case, dict]:
    adapter = ADAPTERS[spec.function]
    generated = spec.generate(seed)
    inputs = [n for n in adapter.signature.parameters if n in generated]
    tensors_at = dict(leaves(generated))
    # Gradients for float32 cases; half-precision cases test dtype behaviour only.
    float32 = all(t.dtype == torch.float32 for t in tensors_at.values() if t.is_floating_point())
    grads = [p for p, t in tensors_at.items() if t.is_floating_point() and p.split("/")[0] in adapter.float_args]
    grads = grads if spec.check == "output" and float32 and spec.gradient else []
    case = spec.case(generated, inputs, grads)
    tensors = {}
    for path, t in tensors_at.items():
        tensors[f"in/{path}"] = swap_view(t, case.views.get(path))
    if spec.check == "train":  # judged by what it trains (check_training): its inputs are the whole case
        return case, tensors
    fn = getattr(reference, spec.function)
    # Expected values come from float64 (float32 inputs are widened), so they are the
    # exact answer rounded once, not one float32 implementation's rounding.
    wide = {p: _widen(t).requires_grad_(p in grads) for p, t in tensors_at.items()}
    kwargs = {**case.args, **assemble(generated, wide)}
    if spec.check == "raises":
        try:
            with spying() as used:
                fn(**kwargs)
        except Exception:
            if not case.hidden:
                _add_fingerprints(case, tensors, kwargs, None, mistakes, used if skip_unreached else None)
            return case, tensors
        raise AssertionError(f"catalogue case {case.id} should raise, but the reference returned")

    with spying() as used:
        out = fn(**kwargs)
    expected = out if isinstance(out, dict) else _narrow(out.detach())
    if isinstance(expected, torch.Tensor) and expected.dtype in (torch.float16, torch.bfloat16) \
            and (case.atol or case.rtol):  # a bit-exact function (a lookup) stays bit-exact in 16 bits
        case.ulps = 1  # judged against the float32 result rounded once: at most 1 ulp of the output dtype
    if not case.hidden:  # hidden cases never explain themselves
        _add_fingerprints(case, tensors, kwargs, expected, mistakes, used if skip_unreached else None)
    if isinstance(out, dict):
        return case, {**tensors, **flatten("out", out)}
    tensors["out"] = expected
    if grads:
        g = torch.Generator().manual_seed(seed * 7919 + zlib.crc32(case.id.encode()))
        cot = torch.randn(out.shape, generator=g, dtype=torch.float32)
        expected_grads = {f"grad/{path}": _narrow(grad) for path, grad in
                          zip(grads, torch.autograd.grad(out, [wide[p] for p in grads], cot.to(out.dtype)))}
        if all(t.abs().max() <= case.grad_atol for t in expected_grads.values()):
            # a gradient that is 0 within tolerance (a saturated softmax) is matched by any constant
            # function: a check that cannot fail, and a twin a fake would pass
            return dataclasses.replace(case, grads=[]), tensors
        tensors.update(expected_grads, cot=cot)
    return case, tensors


def _add_fingerprints(case: Case, tensors: dict, kwargs: dict, expected, mistakes: list,
                      used: set[str] | None) -> None:
    """Store a sample of each known mistake's result on this case, where it differs.

    `expected` is None for a must-raise case: there, any result is the mistake's. `used`:
    the pieces the reference call used; a mistake that patches none of them is skipped.
    Samples are stored packed, one index and one value tensor per case (Term.fingerprints). A function
    that names its own pieces' mistakes only (names_own_pieces_only) gets no others, whatever `used` is."""
    samples = []
    own = ADAPTERS[case.function].symbols if ADAPTERS[case.function].names_own_pieces_only else None
    for variant in mistakes:
        if (used is not None and not variant.reaches(used)) or (own is not None and not variant.reaches(own)):
            continue
        out = _variant_output(variant, case.function, kwargs)
        if out is None:
            continue
        out = _narrow(out) if isinstance(out, torch.Tensor) else out
        baseline = expected if expected is not None else torch.zeros_like(out) if isinstance(out, torch.Tensor) else {}
        fp = fingerprint(out, baseline, zlib.crc32(f"{case.id}/{variant.name}".encode()),
                         max(case.atol, 1e-6), max(case.rtol, 1e-5), case.ulps)
        if fp is not None:
            case.diagnoses.append(variant.name)
            if "idx" in fp:
                samples.append(fp)
            else:  # counts, one tensor per key
                tensors.update(flatten(f"diag/{variant.name}", fp))
    if samples:
        tensors.update({"diag#idx": torch.cat([fp["idx"] for fp in samples]),
                        "diag#val": torch.cat([fp["val"] for fp in samples]),
                        "diag#sizes": torch.tensor([fp["idx"].numel() for fp in samples], dtype=torch.int32)})


def _variant_output(variant, function: str, kwargs: dict):
    """The variant's result on these arguments, or None where it raises. Without autograd first (cheaper);
    a call that trains inside (a checkpoint or training drill calls backward) runs with it: under no_grad
    alone those raised, and no drill's mistake ever had a fingerprint (blind trial 11's vague checkpoint)."""
    for grad in (False, True):
        torch.manual_seed(0)  # variants with randomness (dropout) still build byte-identical terms
        try:
            with torch.set_grad_enabled(grad):
                return getattr(variant, function)(**_fresh(kwargs))
        except Exception:
            continue
    return None


def _fresh(kwargs: dict) -> dict:
    """A copy of the arguments for one variant: a mistake that writes into its inputs must
    not change what the variants after it see."""
    return assemble(kwargs, {p: v.detach().clone().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor)
                             else v for p, v in leaves(kwargs)})


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
