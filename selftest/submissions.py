"""Purpose-made submissions for the grading selftests, and what to read off their results."""

import os
import shutil
import stat
import zipfile
from pathlib import Path

from conftest import PROJECT, edit, reference_as_student
from harness.contract import ADAPTERS
from harness.sandbox import BASE_UID

FULL = sum(a.points for a in ADAPTERS.values())
HOSTILE = Path(__file__).parent / "hostile"
CANARY = "HARNESS_CANARY_do_not_leak"
MARKER = "6061"  # the hostile submissions' `sleep 6061` children

# name -> (start from, file to edit, old, new): honest work and known mistakes
EDITED = {
    "half_split_rope": ("rope.py", "even, odd = x[..., 0::2], x[..., 1::2]",
                        "even, odd = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]"),
    "no_scale": ("attention.py", "/ math.sqrt(Q.shape[-1])", ""),
    "syntax_error": ("attention.py", "def silu(", "def silu(:\ndef _("),
    # attention's causal mask is made without device=: right on the CPU, so judged on devices
    "mask_on_cpu": ("attention.py", "dtype=torch.bool, device=x.device).tril()", "dtype=torch.bool).tril()"),
}
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
}


def copy_stubs(dst: Path) -> Path:
    shutil.copytree(PROJECT / "student", dst / "student", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT / "adapters.py", dst / "adapters.py")
    return dst


def with_attack(dst: Path, start: str, attack: str, constants: dict) -> Path:
    (reference_as_student if start == "reference" else copy_stubs)(dst)
    header = "".join(f"{k} = {v!r}\n" for k, v in constants.items())
    with (dst / "adapters.py").open("a") as f:
        f.write("\n\n" + header + (HOSTILE / attack).read_text())
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
    linked = reference_as_student(subs / "symlinked_adapters")
    (linked / "adapters.py").unlink()
    (linked / "adapters.py").symlink_to(PROJECT / "reference" / "adapters.py")


def survivors() -> list[str]:
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            uid = os.stat(f"/proc/{p}").st_uid
        except OSError:
            continue
        if f"sleep {MARKER}" in cmdline or BASE_UID <= uid < BASE_UID + 64:
            found.append(f"{p}: uid {uid} {cmdline[:80]}")
    return found


def hangs_and_exits(dst: Path) -> Path:
    sub = reference_as_student(dst)
    for target, before, after in (HANGS, EXITS):
        edit(sub / "student" / target, before, after)
    return sub


def points_per_function(result) -> dict[str, float]:
    """Points per contract function."""
    scores = dict.fromkeys(ADAPTERS, 0.0)
    earned = result.scores()
    for t in result.tests:
        scores[t.adapter] += earned[t.id][0]
    return scores
