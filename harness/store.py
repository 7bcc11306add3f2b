"""The fixture store: one term is `fixtures/<term>/manifest.json` plus safetensors files.

Reading verifies every file's sha256 before any tensor is used, and never writes.
Hidden cases live in `hidden/` with a manifest of their own, so a student release
is the public folder alone. Nothing here uses pickle.
"""

import functools
import hashlib
import json
import os
import re
import tomllib
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

import torch
from safetensors.torch import load, save_file

from harness.paths import assemble, leaves

SCHEMA = 2  # 2: mostly-zero tensors sparse, weights on a grid in 16 bits (_sparse, _packed); 1 is read too
READABLE = (1, 2)
MANIFEST = "manifest.json"
HIDDEN = "hidden"
RESTORE = "Restore it from the release (e.g. `git checkout -- fixtures/`); tests never regenerate fixtures."


class FixtureError(Exception):
    """A term is unknown, missing a file, or a file does not match its recorded hash."""



# Hints whose wording a term built earlier stored wrong: what reports say instead. Each is the
# variant's hint in reference/variants.py today, so a rebuilt term stores the same words.
REWORDED = {
    # stored: "sin and cos swapped: even dimensions hold sin, odd dimensions cos", the correct layout
    "swapped_sin_cos": "sin and cos swapped: your even dimensions hold cos and your odd ones sin; even dimensions hold sin, odd ones cos",
    # stored: only the rebinding; blind trial 5's generator, gone through twice, and blind trial 10's norm of
    # the parameters leave them the same way
    "clip_not_applied": ("gradients left as they were: the clip factor never reached .grad. Either `g = g * scale` "
                         "made a new tensor and rebound a name (scale each gradient in place: p.grad.mul_(scale)), or "
                         "`parameters` is a generator your code went through twice: the first pass, for the norm, used "
                         "it up, and the second found nothing to scale (make it a list first), or the norm was not the "
                         "gradients' own (the parameters', p instead of p.grad)"),
}

@dataclass
class Case:
    function: str
    name: str
    args: dict              # non-tensor arguments, JSON values
    inputs: list[str]       # tensor arguments stored in the file, in call order
    check: str = "output"   # "output": compare with the stored result; "raises": must raise; "train": check_training
    atol: float = 0.0       # atol = rtol = 0 means bit-exact (torch.equal)
    rtol: float = 0.0
    grads: list[str] = field(default_factory=list)  # input paths ("weights/ln1.weight") with a stored gradient
    grad_atol: float = 1e-6
    grad_rtol: float = 1e-5
    ulps: int = 0           # > 0: float16/bfloat16 outputs may differ by this many units in the last place
    views: dict = field(default_factory=dict)       # input path -> a VIEWS layout (a non-contiguous view)
    hidden: bool = False
    note: str = ""          # what this case is about, shown in failure reports
    diagnoses: list[str] = field(default_factory=list)  # known mistakes with a stored fingerprint
    file: str = ""
    twin_of: str = ""       # a hidden twin: the name of the public case it repeats on fresh values

    @property
    def id(self) -> str:
        return f"{self.function}/{self.name}"


def terms_root(project: Path) -> Path:
    return project / "fixtures"


def pinned_term(project: Path) -> str:
    """The term `[tool.harness] term` in the project's pyproject.toml pins."""
    return tomllib.loads((project / "pyproject.toml").read_text())["tool"]["harness"]["term"]


def pin_term(project: Path, name: str) -> None:
    """Rewrite the `[tool.harness] term` line, leaving the rest of pyproject.toml as it is."""
    path = project / "pyproject.toml"
    text, count = re.subn(r'(?m)^term = ".*"$', f'term = "{name}"', path.read_text())
    if count != 1:
        raise ValueError(f"{path}: expected one `term = \"...\"` line under [tool.harness], found {count}")
    path.write_text(text)


def list_terms(project: Path) -> list[str]:
    root = terms_root(project)
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST).is_file()) if root.is_dir() else []


class Term:
    """A verified, read-only fixture term."""

    def __init__(self, project: Path, name: str, hidden: bool = False):
        self.name = name
        self.dir = terms_root(project) / name
        if not (self.dir / MANIFEST).is_file():
            known = ", ".join(list_terms(project)) or "none"
            raise FixtureError(f"unknown fixture term {name!r}; terms in {terms_root(project)}: {known}. "
                               + (f"The environment's HARNESS_TERM={name!r} chose it: unset it, or set it to one of "
                                  "those."  # TA trial 13 looked for the name in pyproject.toml
                                  if os.environ.get("HARNESS_TERM") == name else
                                  "Set [tool.harness] term in pyproject.toml, or pass --term NAME."))
        # Every file is read once and hashed; its tensors are parsed from those same bytes when a test
        # first needs them: code that runs later (a student's) cannot swap a file between the check and its use.
        self._files = _Parsed()
        self._grouped: dict[str, dict[str, dict]] = {}
        self.sealed = False  # set by the grader during visible tests: hidden cases' data is then unreadable
        self.manifest = _read_manifest(self.dir, self._files, "")
        self.cases = _cases(self.manifest, "")
        self.hidden_loaded = hidden and (self.dir / HIDDEN / MANIFEST).is_file()
        self.grading_seed = None  # the hidden manifest's: known only where hidden cases are loaded
        self.hidden_digest = None
        if self.hidden_loaded:
            hidden_manifest = _read_manifest(self.dir / HIDDEN, self._files, HIDDEN + "/")
            self.cases += _cases(hidden_manifest, HIDDEN + "/")
            self.grading_seed = hidden_manifest.get("grading_seed")
            # The hidden files' digests: a secret no run of a catalogue from a guessed seed gives back (a
            # 40-bit seed can be searched; what property draws reveal is keyed by this too).
            self.hidden_digest = hashlib.sha256(json.dumps(hidden_manifest.get("files", {}), sort_keys=True)
                                                .encode()).hexdigest()

    @property
    def hidden_counts(self) -> dict[str, int]:
        return self.manifest.get("hidden_counts", {})

    @functools.cached_property
    def functions(self) -> dict[str, dict]:
        """What this term covers, in course order: function -> {"points", "tests", "hidden_tests"}, its points
        and fixture tests when the term was built. Grading and the progress table use these points, so an old
        term keeps its maximum whatever the contract gains later, and a function it does not cover is not
        run on it. A term built before the record gets one from what it holds: the contract's
        points today, and a twin per public test beside its own scored hidden ones."""
        if "functions" in self.manifest:
            return self.manifest["functions"]
        public = [c for c in self.cases if not c.hidden]
        twins = covered(public, {})
        return covered(public, {f: self.scored_hidden.get(f, 0) + twins.get(f, {}).get("tests", 0)
                                for f in self.hidden_counts})

    @functools.cached_property
    def hidden_numbers(self) -> dict[str, int]:
        """A hidden case's id -> its number among its function's hidden cases, from 1: the name its tests go
        under (plugin._public_id), which says nothing about its inputs."""
        numbers, counts = {}, {}
        for c in self.cases:
            if c.hidden:
                counts[c.function] = counts.get(c.function, 0) + 1
                numbers[c.id] = counts[c.function]
        return numbers

    @property
    def uses(self) -> dict[str, list[str]]:
        """Function -> the functions the reference's code for it uses (run_transformer_block -> run_softmax,
        ...), recorded at build time; {} for a term built before the record."""
        return self.manifest.get("uses", {})

    @property
    def scored_hidden(self) -> dict[str, int]:
        """Hidden tests per function that carry points: its own hidden cases' checks (not the twins')."""
        return self.manifest.get("scored_hidden", {})

    def output_cases(self, function: str) -> list[Case]:
        """`function`'s public output cases, then, where hidden cases are loaded (grading), their
        twins: what a module's forward is checked against (tests marked forward_values)."""
        public = [c for c in self.cases if c.function == function and c.check == "output" and not c.hidden]
        return public + [c for c in self.cases if c.function == function and c.check == "output" and c.twin_of]

    @property
    def hints(self) -> dict[str, str]:
        """Known mistake -> what a matching result is diagnosed as (as reworded since the term was built)."""
        stored = self.manifest.get("hints", {})
        return {**stored, **{name: text for name, text in REWORDED.items() if name in stored}}

    def fingerprints(self, case: Case) -> dict[str, dict]:
        """Known mistake -> its stored sample ({"idx", "val"}) or its counts. Samples are packed
        in the order of case.diagnoses (build._add_fingerprints)."""
        stored = self.tensors(case)
        counts = {name: unflatten(stored, f"diag/{name}") for name in case.diagnoses}
        sampled = [name for name in case.diagnoses if not counts[name]]
        if not sampled:
            return counts
        sizes = stored["diag#sizes"].tolist()
        pieces = zip(stored["diag#idx"].split(sizes), stored["diag#val"].split(sizes))
        counts.update({name: {"idx": idx, "val": val} for name, (idx, val) in zip(sampled, pieces)})
        return {name: counts[name] for name in case.diagnoses}

    def tensors(self, case: Case) -> dict[str, torch.Tensor]:
        """Every stored tensor of a case, keyed by role path ("in/weights", "grad/weights/ln1.weight")."""
        if case.hidden and self.sealed:
            raise FixtureError(f"a visible test read the hidden case {case.id}: its inputs would reach the "
                               "worker that serves visible tests. Filter hidden cases out (`not case.hidden`).")
        if case.file not in self._grouped:  # a file's tensors grouped by case, once: a test reads its case's often
            grouped = self._grouped[case.file] = {}
            for key, value in self._files[case.file].items():
                name, _, role = key.partition("/")
                grouped.setdefault(name, {})[role] = value
        return self._grouped[case.file].get(case.name, {})

    def inputs(self, case: Case, requires_grad: bool = False) -> dict:
        """Keyword arguments for the adapter, fresh copies so a mutating adapter harms nothing.

        With requires_grad, every path in case.grads is a leaf that requires grad."""
        stored = self.tensors(case)
        structure = {arg: stored[f"in/{arg}"] if f"in/{arg}" in stored else unflatten(stored, f"in/{arg}")
                     for arg in case.inputs}
        made = {path: self._leaf(case, path, t, requires_grad) for path, t in leaves(structure)}
        return {**case.args, **assemble(structure, made)}

    @staticmethod
    def _leaf(case: Case, path: str, stored: torch.Tensor, requires_grad: bool) -> torch.Tensor:
        t = stored.clone().requires_grad_(requires_grad and path in case.grads)
        return swap_view(t, case.views.get(path))

    def expected(self, case: Case):
        """The stored result: a tensor, or a dict for functions that return one."""
        stored = self.tensors(case)
        if "out" in stored:
            return stored["out"]
        return {k: v.item() for k, v in unflatten(stored, "out").items()}


def checks_for(case: Case) -> list[str]:
    """The tests a case makes: one must-raise test, one training test, or an output test and, with
    gradients, a gradient test."""
    if case.check in ("raises", "train"):
        return [case.check]
    return ["output", "gradient"] if case.grads else ["output"]


def covered(public: list[Case], hidden_tests: dict[str, int]) -> dict[str, dict]:
    """The record of what a term covers (Term.functions) from its public cases and its hidden tests per
    function: every contract function with cases, and every builder its cases prove (get_X by run_X)."""
    from harness.contract import ADAPTERS
    tests: dict[str, int] = {}
    for case in public:
        tests[case.function] = tests.get(case.function, 0) + len(checks_for(case))
    held = set(tests) | set(hidden_tests)
    return {name: {"points": a.points, "tests": tests.get(name, 0), "hidden_tests": hidden_tests.get(name, 0)}
            for name, a in ADAPTERS.items() if name in held or a.proved_by in held}


# Non-contiguous inputs are stored contiguous and viewed by swapping two axes (its own inverse):
# "transposed" as x.T, "heads" as the layout right after a head split, [..., seq, h, d] -> [..., h, seq, d].
VIEWS = {"transposed": (-1, -2), "heads": (-3, -2)}


def swap_view(t: torch.Tensor, layout: str | None) -> torch.Tensor:
    return t.transpose(*VIEWS[layout]) if layout else t


def unflatten(stored: dict, prefix: str) -> dict:
    """{"in/weights/ln1.weight": t, ...} -> {"ln1.weight": t, ...} for prefix "in/weights"."""
    start = prefix + "/"
    return {k[len(start):]: v for k, v in stored.items() if k.startswith(start)}


def flatten(prefix: str, value) -> dict:
    """The inverse of unflatten: a tensor or a dict of tensors or ints under one prefix."""
    if isinstance(value, dict):
        return {f"{prefix}/{k}": v if isinstance(v, torch.Tensor) else torch.tensor(v)
                for k, v in value.items()}
    return {prefix: value}


def _read_manifest(folder: Path, files: "_Parsed", prefix: str) -> dict:
    """Read and check a manifest and all its files' bytes into `files`."""
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise FixtureError(f"{path} is unreadable ({e}). {RESTORE}") from e
    if manifest.get("schema") not in READABLE:
        raise FixtureError(f"{path} has schema {manifest.get('schema')!r}; this harness reads schemas "
                           f"{', '.join(map(str, READABLE))}: update the harness (or rebuild the term with it).")
    for rel, digest in manifest["files"].items():
        file = folder / rel
        if not file.is_file():
            raise FixtureError(f"fixture file {file} is missing. {RESTORE}")
        data = file.read_bytes()
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise FixtureError(f"fixture file {file} was modified or truncated: its sha256 is "
                               f"{actual[:12]}…, the manifest records {digest[:12]}…. {RESTORE}")
        files.raw[prefix + rel] = data
    return manifest


class _Parsed(dict):
    """File -> its tensors, parsed from its verified bytes at first use: a run that tests one function
    (or one of several processes, pytest --jobs) parses only the files it reads."""

    def __init__(self):
        super().__init__()
        self.raw: dict[str, bytes] = {}

    def __missing__(self, rel: str) -> dict[str, torch.Tensor]:
        tensors = self[rel] = _dense(load(self.raw.pop(rel)))
        return tensors


# A tensor that is mostly zeros (an embedding table's gradient: only the rows the ids hit) is
# stored as its shape, the flat indices of its other elements and their values. Lossless, -0.0
# included; everything that reads a term sees the dense tensor.
SPARSE = ("#shape", "#idx", "#val")


def _sparse(key: str, t: torch.Tensor) -> dict[str, torch.Tensor]:
    flat = t.reshape(-1)
    if not t.is_floating_point() or flat.numel() * t.element_size() < 4096:
        return _packed(key, t)
    idx = ((flat != 0) | torch.signbit(flat)).nonzero().reshape(-1)
    if idx.numel() * (4 + t.element_size()) > flat.numel() * t.element_size() // 2:
        return _packed(key, t)
    return {key + "#shape": torch.tensor(t.shape, dtype=torch.int64), key + "#idx": idx.to(torch.int32),
            **_packed(key + "#val", flat[idx].clone())}


# A float32 tensor whose values are all k * 2^-e with |k| < 2^15 (weights the catalogue draws
# on_grid) is stored as int16 k and e. Lossless too: anything else stays float32.

def grid_exponent(t: torch.Tensor) -> int:
    """e such that the largest |value| of t is 2^14 to 2^15 steps of 2^-e."""
    return 14 - int(torch.floor(torch.log2(t.abs().max().clamp_min(1e-30))).item())


def _packed(key: str, t: torch.Tensor) -> dict[str, torch.Tensor]:
    if t.dtype != torch.float32 or t.numel() < 256 or not torch.isfinite(t).all() or not t.abs().max() > 0:
        return {key: t}
    e = grid_exponent(t)
    k = torch.ldexp(t.double(), torch.tensor(e)).round().clamp(-32767, 32767)
    if not torch.equal(_unpacked(k.to(torch.int16), e).view(torch.int32), t.view(torch.int32)):
        return {key: t}  # not on a grid (or a -0.0): as it is
    return {key + "#q16": k.to(torch.int16), key + "#exp": torch.tensor(e, dtype=torch.int32)}


def _unpacked(k: torch.Tensor, e: int) -> torch.Tensor:
    return torch.ldexp(k.to(torch.float64), torch.tensor(-e)).to(torch.float32)


def _dense(data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    for key in [k for k in data if k.endswith("#q16")]:
        base = key.removesuffix("#q16")
        data[base] = _unpacked(data.pop(key), int(data.pop(base + "#exp")))
    for key in [k for k in data if k.endswith("#shape")]:
        base = key.removesuffix("#shape")
        shape, idx, val = (data.pop(base + suffix) for suffix in SPARSE)
        t = torch.zeros(int(shape.prod()), dtype=val.dtype)
        t[idx.long()] = val
        data[base] = t.reshape(shape.tolist())
    return data


def _cases(manifest: dict, prefix: str) -> list[Case]:
    cases = [Case(**c) for c in manifest["cases"]]
    for case in cases:
        case.file = prefix + case.file
    return cases


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_term(folder: Path, meta: dict, cases: list[Case], tensors: dict[str, dict]) -> None:
    """Write one manifest (public or hidden) and one safetensors file per function.

    `tensors[case.id]` maps role keys ("in/weights", "out", ...) to tensors.
    The same inputs give byte-identical files.
    """
    folder.mkdir(parents=True, exist_ok=True)
    by_file: dict[str, dict] = {}
    for case in cases:
        case.file = f"{case.function}.safetensors"
        for role, t in tensors[case.id].items():
            by_file.setdefault(case.file, {}).update(_sparse(f"{case.name}/{role}", t.detach().contiguous().clone()))
    files = {}
    for rel, data in sorted(by_file.items()):
        save_file(data, folder / rel)
        files[rel] = sha256(folder / rel)
    (folder / MANIFEST).write_text(_manifest_text({"schema": SCHEMA, **meta, "files": files}, cases))


def _manifest_text(head: dict, cases: list[Case]) -> str:
    """The manifest: its head indented, then one case per line without the fields left at their
    defaults (Case fills them in): small, and a term diff shows one line per changed case."""
    defaults = {f.name: f.default if f.default_factory is MISSING else f.default_factory() for f in fields(Case)}
    lines = [json.dumps({k: v for k, v in asdict(c).items() if defaults[k] is MISSING or v != defaults[k]},
                        separators=(",", ":")) for c in cases]
    return json.dumps(head, indent=1)[:-2] + ',\n "cases": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"

