"""Load an adapters module and check every call against the contract.

Whatever module `--adapters` names, each function is wrapped in a check of the contract's
jaxtyping annotations (harness/typecheck.py), so a wrong shape, dtype or a `None` fails with
the adapter's name, the argument and the axis rather than deep in a test.
"""

import importlib
import importlib.util
import inspect
import sys
import sysconfig
import traceback
from pathlib import Path

from harness.contract import ADAPTERS, Adapter
from harness.typecheck import Check, Mismatch, describe


HARNESS, IMPORTLIB = Path(__file__).parent, Path(importlib.__file__).parent
STDLIB = Path(sysconfig.get_paths()["stdlib"])
GENERATORS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR  # a yield is no return


class AdaptersError(Exception):
    """The adapters module cannot be loaded or lacks a contract function."""


class StudentImportError(AdaptersError):
    """A file of the student's package failed to import when a function first used it."""


class ContractViolation(AssertionError):
    """An adapter was called or returned outside its declared signature."""


def load_module(target: str, explicit: bool = True):
    """`target` is a dotted module name, a path to a .py file, or `module:attribute`.
    `explicit`: the target was named (--adapters, $HARNESS_ADAPTERS), not the default."""
    name, _, attribute = target.partition(":") if not target.endswith(".py") else (target, "", "")
    try:
        if name.endswith(".py"):
            path = Path(name).resolve()
            if not path.is_file():
                raise AdaptersError(f"--adapters {target}: no such file {path}")
            if (path.parent / "student").is_dir():  # its own student/ beside it, not this repository's
                sys.path.insert(0, str(path.parent))
                for loaded in [m for m in sys.modules if m == "student" or m.startswith("student.")]:
                    del sys.modules[loaded]
            spec = importlib.util.spec_from_file_location(f"_adapters_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(name)
    except AdaptersError:
        raise
    except Exception as e:  # noqa: BLE001  (student code that fails at import time)
        where = failing_line(e)
        if isinstance(e, ModuleNotFoundError) and not where:  # the adapters module itself
            hint = " Pass a dotted module name or a path to a .py file." if explicit else \
                " Run pytest inside the assignment's folder (the one with adapters.py)."
            raise AdaptersError(f"could not import adapters {target!r}: {e}.{hint}") from None
        missing = " (a typo, or a package to install?)" if isinstance(e, ModuleNotFoundError) else ""
        raise AdaptersError(f"importing adapters {target!r} failed{' at ' + where if where else ''}: "
                            f"{type(e).__name__}: {e}{missing}") from None
    return getattr(module, attribute) if attribute else module


def _missing_file_hint(error: BaseException) -> str:
    name = getattr(error, "name", None) or ""
    if isinstance(error, ModuleNotFoundError) and name.count(".") == 1 and name.split(".")[0] in ("student", "reference"):
        return (f"\n  {name.replace('.', '/')}.py is missing: `python -m harness contract` writes the stubs of "
                "files a newer contract added")
    return ""


def _raised_by_import(error: BaseException) -> bool:
    """The error came out of the import system: a module of the student's package failing to import."""
    if getattr(error, "__module__", "") == "harness.runtime":
        return False
    return isinstance(error, ImportError) or any(f.filename.startswith("<frozen importlib") for f in
                                                 traceback.extract_tb(error.__traceback__))


def failing_line(error: BaseException) -> str:
    """`file:line (`statement`)` of the code that failed to import: the innermost frame that
    is not the import machinery or the harness, or where a SyntaxError points."""
    if isinstance(error, SyntaxError) and error.filename:
        path, line, text = error.filename, error.lineno, error.text or ""
    else:
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if not f.filename.startswith("<") and not {HARNESS, IMPORTLIB} & set(Path(f.filename).parents)]
        if not frames:
            return ""
        path, line, text = frames[-1].filename, frames[-1].lineno, frames[-1].line or ""
    return f"{shown_path(path)}:{line}" + (f" (`{text.strip()}`)" if text.strip() else "")


def shown_path(path: str) -> str:
    """A path as the student knows it: from the working folder, or from student/."""
    full = Path(path).resolve()
    try:
        return full.relative_to(Path.cwd()).as_posix()
    except ValueError:
        parts = full.parts
        return "/".join(parts[len(parts) - 1 - parts[::-1].index("student"):]) if "student" in parts else str(full)


class Adapters:
    """Attribute access to contract-checked adapter functions."""

    def __init__(self, target: str, module=None, explicit: bool = True):
        """`module` stands in for the import of `target`: in grading, the worker's functions."""
        self.target = target
        self.module = load_module(target, explicit) if module is None else module
        self._checked = {}

    def __getattr__(self, name: str):
        if name not in ADAPTERS:
            raise AttributeError(name)
        if name not in self._checked:
            impl = getattr(self.module, name, None)
            if impl is None:
                raise AdaptersError(f"{self.target} has no function {name}; "
                                    f"copy its signature from harness/contract.py")
            self._checked[name] = checked(ADAPTERS[name], impl)
        return self._checked[name]


def checked(adapter: Adapter, impl):
    """Wrap `impl` in a function with the contract's parameter names that checks every argument
    and the return value against the contract's annotations (harness/typecheck.py)."""
    params = adapter.signature.parameters
    namespace = {f"_default_{n}": p.default for n, p in params.items()}
    declared = ", ".join(n if p.default is p.empty else f"{n}=_default_{n}" for n, p in params.items())
    exec(f"def bind({declared}):\n    return ({''.join(n + ', ' for n in params)})", namespace)
    bind = namespace["bind"]  # Python's own binding: positional or keyword, defaults filled in
    checks = [(n, Check.of(p.annotation)) for n, p in params.items()]
    returns = Check.of(adapter.signature.return_annotation)

    def call(*args, **kwargs):
        values = bind(*args, **kwargs)
        sizes = {}
        for (name, check), value in zip(checks, values):
            try:
                check.check(value, sizes)
            except Mismatch as e:
                raise ContractViolation(explain(adapter, f"was called with {name}={describe(value)}", check, e,
                                                sizes)) from None
        try:
            out = impl(*values)
        except Exception as e:  # noqa: BLE001  (only a failed import is rewritten; the rest re-raised as is)
            if not _raised_by_import(e):
                raise
            where = failing_line(e)
            raise StudentImportError(
                f"{adapter.name} cannot run: its code does not import{' (' + where + ')' if where else ''}: "
                f"{type(e).__name__}: {e}\n  only the functions whose code is in that file are stopped; "
                "fix it and they run again" + _missing_file_hint(e)) from None
        try:
            returns.check(out, sizes)
        except Mismatch as e:
            source = returned_none(adapter, impl, values) if out is None else None
            raise ContractViolation(explain(adapter, f"returned {describe(out)}", returns, e, sizes, source)) from None
        return out
    call.__name__ = adapter.name
    call.adapter = adapter
    call.remote_probe = getattr(impl, "remote_probe", None)  # a remote function runs probes in its worker
    return call


def explain(adapter: Adapter, what: str, check: Check, problem: Mismatch, sizes: dict,
            none_from: str | None = None) -> str:
    """What was passed or returned, what the contract says, why it does not fit, and the axis sizes the
    inputs bound. `none_from`: for a None returned, the student's function that returned it (returned_none)."""
    text = f"{adapter.name} {what}, but the contract says {check.text}"
    if what == "returned None":
        text += f": {none_from}" if none_from else \
            ": a function of your code that it calls returned None (look for a missing `return` in student/)"
    elif not str(problem).startswith("not "):
        text += f": {problem}"
    if sizes:
        text += f"\n  axis sizes bound by the inputs: {', '.join(f'{k}={v}' for k, v in sizes.items())}"
    return text + f"\n  see the docstring of {adapter.name} in adapters.py"


def returned_none(adapter: Adapter, impl, values: tuple) -> str | None:
    """Which of the student's functions handed the adapter its None: call `impl` again under a
    profiler and take the last of the student's frames to return before the adapter did (the
    outermost call of the code under test; a helper that returns None on purpose finishes
    earlier). None where the code runs elsewhere (a grading worker) or no such frame returned."""
    if getattr(impl, "remote_probe", None):
        return None
    glue = getattr(impl, "__code__", None)
    returns = []

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "return" and code is not glue and code.co_name not in ADAPTERS and code.co_name != "with_weights" \
                and not code.co_flags & GENERATORS and _is_student(code.co_filename):
            returns.append((code, frame.f_lineno, arg is None))
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        impl(*values)
    except Exception:  # noqa: BLE001 - what returned before the error is still evidence
        pass
    finally:
        sys.setprofile(previous)
    if not returns or not returns[-1][2]:
        return None
    code, line, _ = returns[-1]
    import linecache
    text = linecache.getline(code.co_filename, line).strip()
    where = shown_path(code.co_filename)
    said = f"`{code.co_qualname}` ({where}:{code.co_firstlineno}), which it calls, returned None"
    said += f" after {where}:{line}" + (f" (`{text[:80]}`)" if text else "")
    if _drops_a_value(code.co_filename, line):
        said += ", whose value is computed and dropped"
    return said + ". Add the missing `return` there (adapters.py only passes on what your code returns)"


def _is_student(filename: str) -> bool:
    """Not the harness, an installed package or Python's own library."""
    path = Path(filename)
    return not (filename.startswith("<") or "site-packages" in filename or HARNESS in path.parents
                or STDLIB in path.parents)


def _drops_a_value(filename: str, line: int) -> bool:
    """Whether the statement at `line` is an expression whose value nothing keeps: not a
    print, an in-place method (`x.add_(...)`) or a docstring."""
    import ast
    try:
        tree = ast.parse(Path(filename).read_text())
    except (OSError, SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and node.lineno == line and not isinstance(node.value, ast.Constant):
            call = node.value.func if isinstance(node.value, ast.Call) else None
            name = getattr(call, "attr", None) or getattr(call, "id", None) or ""
            return name != "print" and not name.endswith("_")
    return False
