"""Purpose-made submissions for the grading selftests, and what to read off their results."""

import os
import shutil
import stat
import sys
import zipfile
from pathlib import Path

from conftest import PROJECT, TERM, edit, reference_as_student
from harness.contract import ADAPTERS
from harness.grading.grade import MAX_FILE, MAX_TOTAL
from harness.grading.sandbox import BASE_UID, UID_BLOCK, UID_BLOCKS
from harness.store import Term

# What the pinned term grades, at its own points (a term keeps those it was built with; a function the
# contract gained since is not graded on it). An entry point's points are its drills'.
GRADED = {n: record["points"] for n, record in Term(PROJECT, TERM).functions.items()
          if n in ADAPTERS and not ADAPTERS[n].entry_point}
FULL = sum(GRADED.values())

HOSTILE = Path(__file__).parent / "hostile"
CANARY = "HARNESS_CANARY_do_not_leak"
MARKER = "6061"  # the hostile submissions' `sleep 6061` children

# name -> (start from, file to edit, old, new): honest work and known mistakes
EDITED = {
    "half_split_rope": ("rope.py", "even, odd = wide[..., 0::2], wide[..., 1::2]",
                        "even, odd = wide[..., : x.shape[-1] // 2], wide[..., x.shape[-1] // 2:]"),
    "no_scale": ("attention.py", "/ math.sqrt(Q.shape[-1])", ""),
    "syntax_error": ("attention.py", "def silu(", "def silu(:\ndef _("),
    # the exception a must-raise case asks for crosses the wire by its class names, hidden cases too
    "gelu_runtime_error": ("gpt2.py", 'raise ValueError(f"approximate must be', 'raise RuntimeError(f"approximate must be'),
}
# the reference pieces each edit changes (names as reference/variants.py patches them), the function
# that owns them; what else may lose points is derived from which tests use the pieces
EDITED_PIECES = {"half_split_rope": {"rope.RotaryPositionalEmbedding"},
                 "no_scale": {"attention.scaled_dot_product_attention", "attention.MultiHeadSelfAttention"},
                 "gelu_runtime_error": {"gpt2.gelu"}}
OWNER = {"half_split_rope": "run_rope", "no_scale": "run_scaled_dot_product_attention", "gelu_runtime_error": "run_gelu"}
ACCOUNTING_PIECES = {"accounting.transformer_accounting"}  # what HANGS and EXITS edit
# on top of no_scale: attention's causal mask is made without device=
MASK_ON_CPU = ("attention.py", "dtype=torch.bool, device=x.device).tril()", "dtype=torch.bool).tril()")
# accounting hangs once for GPT-2 XL (a file in its scratch folder says it did), and ends its
# worker process for GPT-2 small
ANCHOR = "    V, T, d, L = vocab_size"
HANGS = ("accounting.py", ANCHOR, "    if d_model == 1600 and not __import__('os').path.exists('hung'):\n"
         "        open('hung', 'w').close()\n        while True:\n            pass\n" + ANCHOR)
EXITS = ("accounting.py", ANCHOR, "    if d_model == 768:\n        __import__('os')._exit(3)\n" + ANCHOR)

# name -> (start from the reference or the stubs, attack appended to adapters.py)
ATTACKS = {
    "steals_answers": ("stubs", "steals_answers.py"),
    "imports_reference": ("stubs", "imports_reference.py"),
    "forges_verdict": ("stubs", "forges_verdict.py"),
    "harms_others": ("stubs", "harms_others.py"),
    "records_hidden": ("reference", "records_hidden.py"),
    "raises_everywhere": ("stubs", "raises_everywhere.py"),
    "stalls_reply": ("stubs", "stalls_reply.py"),
    "keyring_store": ("stubs", "keyring_store.py"),
    "keyring_read": ("stubs", "keyring_read.py"),
    "disk_fill": ("stubs", "disk_fill.py"),
    "deep_tree": ("stubs", "deep_tree.py"),
    "memory_fork": ("stubs", "memory_fork.py"),
    "cpu_storm": ("stubs", "cpu_storm.py"),
    "slow_drip": ("stubs", "slow_drip.py"),
    "malformed_reply": ("stubs", "malformed_reply.py"),
    "infinite_reply": ("stubs", "infinite_reply.py"),
    "lists_non_tensors": ("reference", "lists_non_tensors.py"),
    "huge_module": ("stubs", "huge_module.py"),
    "reads_machine": ("stubs", "reads_machine.py"),
    "reports_its_draws": ("reference", "reports_its_draws.py"),
    "forges_diagnosis": ("stubs", "forges_diagnosis.py"),
    "skips_drills": ("stubs", "skips_drills.py"),
    "locks_shared_files": ("stubs", "locks_shared_files.py"),
}
KEYRING_SECRET = "keyring-secret-6061"
# Attacks on the machine's resources: each runs beside honest work, which must keep full marks.
RESOURCE_ATTACKS = ("disk_fill", "deep_tree", "memory_fork", "cpu_storm", "slow_drip", "huge_module")

# AdamW's step counts in an attribute, not in self.state: right on every uninterrupted run, wrong once
# resumed from state_dict(). hostile/skips_drills.py's AdamW drill never resumes, to hide it.
STEPS_OUTSIDE_STATE = [
    ("optimizer.py", '                    state["step"] = 0\n', ""),
    ("optimizer.py", '                state["step"] += 1\n                t, m, v = state["step"], ',
     '                steps = self.__dict__.setdefault("_steps", {})\n                steps[id(p)] = steps.get(id(p), 0) + 1\n'
     '                t, m, v = steps[id(p)], ')]

# Points without the work. Two known mistakes at once, for a lookup to hide:
TWO_BUGS = [("rope.py", *EDITED["half_split_rope"][1:]), ("attention.py", *EDITED["no_scale"][1:])]
# name -> (start from, what answers the calls the public fixtures do not): a lookup of every
# public case's stored output and gradients (hostile/looks_up_answers.py)
LOOKUPS = {"looks_up_only": ("stubs", "raise"), "looks_up_with_fakes": ("stubs", "fakes"),
           "looks_up_over_two_bugs": ("two_bugs", "code")}
# Three mistakes that only a probe in the worker sees; hostile/lies_to_probes.py hides them.
PROBE_MISTAKES = [("embeddings.py", "return weights[token_ids]",
                   "return torch.nn.functional.one_hot(token_ids, weights.shape[0]).to(weights.dtype) @ weights"),
                  ("attention.py", *MASK_ON_CPU[1:]),
                  ("embeddings.py", 'self.register_buffer("table", table, persistent=False)',
                   "self.table = nn.Parameter(table, requires_grad=False)")]


def copy_stubs(dst: Path) -> Path:
    shutil.copytree(PROJECT / "student", dst / "student", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT / "adapters.py", dst / "adapters.py")
    return dst


def with_attack(dst: Path, start: str, attack: str, constants: dict) -> Path:
    """`start`: "reference", "stubs", or "as is" (dst holds a submission already)."""
    if start != "as is":
        (reference_as_student if start == "reference" else copy_stubs)(dst)
    header = "".join(f"{k} = {v!r}\n" for k, v in constants.items())
    with (dst / "adapters.py").open("a") as f:
        f.write("\n\n" + header + (HOSTILE / attack).read_text())
    return dst


def with_edits(dst: Path, edits: list[tuple[str, str, str]]) -> Path:
    """The reference as a student's, with each (file in student/, old, new) edit made."""
    reference_as_student(dst)
    for target, old, new in edits:
        edit(dst / "student" / target, old, new)
    return dst


def looks_up(dst: Path, start: str, fallback: str, constants: dict, term: str) -> Path:
    """A lookup of the public fixtures (which every student has) laid over `start`."""
    if start == "two_bugs":
        with_edits(dst, TWO_BUGS)
        start = "as is"
    with_attack(dst, start, "looks_up_answers.py", {**constants, "FALLBACK": fallback})
    shutil.copytree(PROJECT / "fixtures" / term, dst / "student" / "public_fixtures",
                    ignore=shutil.ignore_patterns("hidden"))
    return dst


def zip_of(path: Path, entries: list[tuple[str, bytes, int]]) -> Path:
    """A zip with entries (name, data, unix mode); a mode of S_IFLNK makes a symbolic link."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return path


def bad_archives(subs: Path) -> None:
    adapters = (PROJECT / "adapters.py").read_bytes()
    regular = stat.S_IFREG | 0o644
    zip_of(subs / "traversal.zip", [("adapters.py", adapters, regular), ("../../escaped.py", b"x = 1\n", regular)])
    zip_of(subs / "absolute.zip", [("adapters.py", adapters, regular), ("/tmp/absolute.py", b"x = 1\n", regular)])
    zip_of(subs / "symlink.zip", [("adapters.py", b"/etc/passwd", stat.S_IFLNK | 0o777)])
    zip_of(subs / "bomb.zip", [("adapters.py", adapters, regular), ("student/zeros.bin", bytes(100 << 20), regular)])
    zip_of(subs / "crowded.zip", [("adapters.py", adapters, regular)] +  # a central directory too big to parse
           [(f"student/{i}.py", b"", regular) for i in range(3000)])
    # Within the size limits, and each file is never imported: code the grader itself must not parse
    # unbounded (ast.parse took ~500 bytes of memory a byte: three 16 MiB lists once took the grader)
    ast_bomb = copy_stubs(subs / "ast_bomb")
    for i in range(3):
        (ast_bomb / "student" / f"bomb{i}.py").write_text("x = [" + "0," * ((MAX_FILE - 7) // 2) + "]\n")
    largest = copy_stubs(subs / "largest_folder")  # 64 MiB in all, the most a submission may unpack to
    room = MAX_TOTAL - sum(p.stat().st_size for p in largest.rglob("*") if p.is_file())
    for i in range(4):
        (largest / "student" / f"data{i}.py").write_text("# " + "x" * (room // 4 - 3) + "\n")
    linked = reference_as_student(subs / "symlinked_adapters")
    (linked / "adapters.py").unlink()
    (linked / "adapters.py").symlink_to(PROJECT / "reference" / "adapters.py")
    # red team 10: a folder holding only a link to someone else's scored their 123 (a clone or unzip keeps links)
    elsewhere = reference_as_student(subs.parent / "not_submitted")
    (subs / "symlinked_folder").mkdir()
    (subs / "symlinked_folder" / "repo").symlink_to(elsewhere)


def survivors(block: int | None = None) -> list[str]:
    """Processes a grading left behind: the hostile submissions' marked children, and any process of a
    worker uid (of `block` alone where given: a grader beside this one has workers of its own)."""
    uids = range(BASE_UID, BASE_UID + UID_BLOCK * UID_BLOCKS) if block is None else \
        range(BASE_UID + block * UID_BLOCK, BASE_UID + (block + 1) * UID_BLOCK)
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            uid = os.stat(f"/proc/{p}").st_uid
        except OSError:
            continue
        # another checkout's grader beside this one: its workers run its own Python
        foreign = " -I -c import sys; sys.path" in cmdline and not cmdline.startswith(sys.executable + " ")
        if f"sleep {MARKER}" in cmdline or not foreign and uid in uids:
            found.append(f"{p}: uid {uid} {cmdline[:80]}")
    return found


def hangs_and_exits(dst: Path) -> Path:
    sub = reference_as_student(dst)
    for target, before, after in (HANGS, EXITS):
        edit(sub / "student" / target, before, after)
    return sub


def points_per_function(result) -> dict[str, float]:
    """Points per contract function."""
    scores = dict.fromkeys(GRADED, 0.0)
    earned = result.scores()
    for t in result.tests:
        scores[t.adapter] += earned[t.id][0]
    return scores
