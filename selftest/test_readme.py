"""Every command the README gives exists: CLI subcommands, pytest options and paths."""

import importlib
import re
import shlex

import pytest

from conftest import PROJECT
from harness.cli import main

README = (PROJECT / "README.md").read_text()
BLOCKS = re.findall(r"```bash\n(.*?)```", README, re.S)
COMMANDS = [line.split("#")[0].strip() for block in BLOCKS for line in block.splitlines() if line.strip()]


def test_readme_gives_the_ci_test_command():
    ci = (PROJECT / ".ci" / "run").read_text()
    assert "pytest selftest -n auto" in COMMANDS and "pytest selftest -n auto" in ci
    assert "pip install -e ." in COMMANDS


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.startswith("python -m harness")])
def test_harness_commands_parse(command, capsys):
    words = shlex.split(command.replace("SEED", "1"))[3:]  # placeholders in the walkthrough
    with pytest.raises(SystemExit) as e:
        main([*words, "--help"])
    assert e.value.code == 0


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.startswith("python ") and c.endswith(".py")
                                     or " benchmarks/" in c])
def test_scripts_exist(command):
    script = next(w for w in shlex.split(command) if w.endswith(".py"))
    assert (PROJECT / script).is_file(), script


def test_module_map_names_every_module_on_its_side_of_the_release():
    import harness
    from harness.term.release import INSTRUCTOR_ONLY
    shipped, instructor = harness.__doc__.split("Instructor only")

    def names(text):  # "name  job" is a module, "name/  job" a package
        return {f"{name}.py" if not folder else name for name, folder in re.findall(r"^(\w+)(/?) {2,}\S", text, re.M)}
    modules = {p.name for p in (PROJECT / "harness").glob("*.py")} - {"__init__.py", "__main__.py"}
    packages = {p.parent.name for p in (PROJECT / "harness").glob("*/__init__.py")}
    assert names(instructor) == INSTRUCTOR_ONLY
    assert names(shipped) == (modules | packages) - INSTRUCTOR_ONLY
    for package in packages:  # each subsystem's own map
        modules = {p.name for p in (PROJECT / "harness" / package).glob("*.py")} - {"__init__.py"}
        assert names(importlib.import_module(f"harness.{package}").__doc__) == modules, package


def test_where_to_write_what_lists_each_files_tests():
    """A TA could not tell which `--function` tests get_batch or gradient_clipping: each file's row names
    the functions whose code lives there, as the contract says (entry points are tested through others)."""
    from harness.contract import ADAPTERS
    expected: dict[str, list[str]] = {}
    for a in ADAPTERS.values():
        if not a.entry_point:
            expected.setdefault(a.impl_module, []).append(a.name)
    text = (PROJECT / "README.md").read_text()
    rows = dict(re.findall(r"^\| `student/(\w+)\.py` \|[^|]*\| (.*) \|$", text, re.M))
    listed = {module: re.findall(r"`(\w+)`", cell) for module, cell in rows.items()}
    assert listed == expected, ("update README's 'Where to write what' table: each student/ file's row lists, "
                                "in contract order, the functions whose impl_module it is", listed, expected)


def test_the_walkthrough_names_every_unit_key():
    """A TA had to read harness/contract.py for the key of the "Train it" unit."""
    from harness.contract import UNITS
    said = re.search(r"a key of `UNITS`: (.*?), in the progress table's order", " ".join((PROJECT / "README.md").read_text().split()))
    assert said and re.findall(r"`([\w.]+)`", said[1]) == [u.key for u in UNITS], said and said[1]
