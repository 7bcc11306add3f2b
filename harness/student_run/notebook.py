"""Check one function from a notebook or a REPL, in-process, with the pytest suite.

    from harness.student_run.notebook import check
    check("run_embedding")                  # your adapters.py and student/, freshly imported
    check("run_embedding", my_embedding)    # a function written in a cell
    check("run_embedding", my_module)       # a module object that defines run_embedding

The same cases, probes and properties run as for `pytest --function NAME`. The report
streams as tests finish; the result renders once: as an HTML table in a notebook, as
text in a REPL or script. Hidden cases are never run here.
"""

import contextlib
import difflib
import html
import io
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

from harness.contract import ADAPTERS

STAND_IN = "notebook_cell"  # the adapters module that code from a cell stands in


@dataclass
class TestResult:
    name: str
    outcome: str  # "passed", "failed" or "skipped" (not run: a dependent check whose function fails on the CPU)
    message: str = ""


@dataclass
class CheckResult:
    """`passed`, `failed` and `skipped`: lists of TestResult; `ok`: every test ran and passed."""
    function: str
    tests: list[TestResult] = field(default_factory=list)
    report: str = ""  # what pytest printed

    @property
    def passed(self) -> list[TestResult]:
        return [t for t in self.tests if t.outcome == "passed"]

    @property
    def failed(self) -> list[TestResult]:
        return [t for t in self.tests if t.outcome == "failed"]

    @property
    def skipped(self) -> list[TestResult]:
        """Not run, and not passed: a check that waits on the function working on the CPU first."""
        return [t for t in self.tests if t.outcome == "skipped"]

    @property
    def ok(self) -> bool:
        return bool(self.tests) and len(self.passed) == len(self.tests)

    @property
    def table(self) -> str:
        """The progress table pytest printed at the end."""
        start = self.report.find("Progress: term")
        return "" if start < 0 else "\n".join(self.report[start:].splitlines()[:-1]).rstrip()

    def __repr__(self) -> str:
        return f"<check {self.function}: {len(self.passed)}/{len(self.tests)} tests passed>"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(t.name)}</td><td style='color:{'green' if t.outcome == 'passed' else 'red'}'>"
            f"{t.outcome}</td><td><pre style='margin:0'>{html.escape(t.message)}</pre></td></tr>"
            for t in self.failed + self.skipped + self.passed)
        return (f"<p><b>{html.escape(self.function)}</b>: {len(self.passed)}/{len(self.tests)} tests passed</p>"
                f"<pre>{html.escape(self.table)}</pre>"
                f"<table><tr><th>test</th><th>result</th><th>message</th></tr>{rows}</table>")


class _Collector:
    def __init__(self, result: CheckResult, stream=None):
        self.result = result
        self.stream = stream  # where each finished test is announced as it finishes

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.failed:
            name = report.nodeid.split("::", 1)[-1]
            message = str(report.longrepr) if report.failed else ""
            if report.skipped and isinstance(report.longrepr, tuple):  # a probe not run: not a pass
                message = str(report.longrepr[2]).removeprefix("Skipped: ")
            self.result.tests.append(TestResult(name, report.outcome, message))
            if self.stream is not None:
                first = f": {message.splitlines()[0][:150]}" if message else ""
                self.stream.write(f"{len(self.result.tests):>3} {self.result.tests[-1].outcome:<6} {name}{first}\n")
                self.stream.flush()


class _Tee(io.StringIO):
    """Keeps what pytest prints, and shows it as it comes."""

    def __init__(self, stream):
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.stream.flush()
        return super().write(text)


def in_notebook() -> bool:
    """A Jupyter kernel (it shows HTML), not a terminal REPL."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return shell is not None and ("ipykernel" in type(shell).__module__ or type(shell).__name__ == "ZMQInteractiveShell")


def project_root() -> Path:
    """The assignment repository: from the working folder upwards, else where harness/ lives."""
    for folder in [Path.cwd(), *Path.cwd().parents]:
        if (folder / "pyproject.toml").is_file() and (folder / "tests").is_dir() and (folder / "adapters.py").is_file():
            return folder
    return Path(__file__).resolve().parents[2]


def fresh_imports(root: Path) -> None:
    """Forget student/ and the adapters, so the next import reads the files as they are now
    (and test modules of another repository that this process ran before)."""
    for name, module in list(sys.modules.items()):
        if name in ("adapters", "student", STAND_IN) or name.startswith(("student.", "_adapters_")):
            del sys.modules[name]
        elif name.startswith("test_") and root / "tests" not in Path(getattr(module, "__file__", "/")).parents:
            del sys.modules[name]


def _stand_in(function: str, impl, target: str):
    """An adapters module whose `function` is `impl` (a function, or taken from a module)."""
    if isinstance(impl, types.ModuleType):
        if not hasattr(impl, function):
            raise ValueError(f"module {impl.__name__} has no function {function}")
        impl = getattr(impl, function)
    if not callable(impl):
        raise TypeError(f"check({function!r}, ...) needs a function or a module, not {type(impl).__name__}")
    _takes_the_contracts_arguments(function, impl)
    from harness.runtime import load_module
    base = load_module(target)
    module = types.ModuleType(STAND_IN)
    module.__dict__.update({k: v for k, v in vars(base).items() if not k.startswith("__")})
    setattr(module, function, impl)
    return module


def _takes_the_contracts_arguments(function: str, impl) -> None:
    """A cell's function is called as the adapter is: TA trial 10's two-parameter function gave 14
    tracebacks of '<lambda>() takes 2 positional arguments but 4 were given'."""
    import inspect
    declared = list(ADAPTERS[function].signature.parameters)
    try:
        signature = inspect.signature(impl)
    except ValueError:  # a builtin without a signature: let the call say
        return
    positional = [p.name for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:len(declared)]
    # the same names in another order bind, and then each gets another's value (TA trial 12)
    reordered = sorted(positional) == sorted(declared) and positional != declared
    try:
        signature.bind(*declared)
    except TypeError:
        reordered = True
    if reordered:
        raise TypeError(f"{getattr(impl, '__name__', 'your function')}{signature} cannot stand in for {function}: "
                        f"the tests call it as {function}({', '.join(declared)}), by position. Give it those "
                        f"parameters, in that order (see the docstring of {function} in adapters.py)")


class NotWrittenYet(Exception):
    """A cell called a function that is still a stub. A notebook shows this line in place of a traceback
    (IPython prints what `_render_traceback_` returns): TA trial 9's stub notebook ended in one."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class CellAdapters:
    """Your adapters for a cell's own code: each call checked against the contract, and a stub's
    NotImplementedError said as what to write first."""

    def __init__(self, adapters):
        self._adapters = adapters

    def __getattr__(self, name: str):
        function = getattr(self._adapters, name)

        def call(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except NotImplementedError as e:
                raise NotWrittenYet(f"{name} is not implemented yet ({e}). This cell needs it: write it, "
                                    f"check(\"{name}\") runs its tests, then run the cell again.") from None
        return call


def adapters() -> CellAdapters:
    """Your adapters ($HARNESS_ADAPTERS, else the repository's adapters.py), re-imported as check() does
    and checked against the contract at every call: for a cell that uses your functions itself (the
    notebook's training cell)."""
    root = project_root()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    fresh_imports(root)
    from harness.runtime import Adapters
    from harness.torch_imports import optimizers_without_dynamo
    optimizers_without_dynamo()  # the cell's AdamW need not import torch._dynamo (1.8 s)
    return CellAdapters(Adapters(os.environ.get("HARNESS_ADAPTERS") or "adapters"))


def _contract_name(function: str) -> str:
    """The contract function `function` names: itself, or the one whose glue calls the student's function
    of that name (check("get_batch") checks run_get_batch, whose docstring is get_batch's spec)."""
    if function in ADAPTERS:
        return function
    calling = [name for name, a in ADAPTERS.items() if any(s.split(".")[-1] == function for s in a.symbols)]
    own = [name for name in calling if name == f"run_{function}" or ADAPTERS[name].entry_point] or calling
    if len(own) == 1:  # get_batch: run_get_batch (CS336's entry point), not the drills that call it too
        return own[0]
    close = difflib.get_close_matches(function, ADAPTERS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"{function!r} is not a contract function{hint}")


def check(function: str, impl=None, *, quiet: bool = False) -> CheckResult:
    """Run every public test of one contract function and return the results. Unless `quiet`,
    the report streams as tests finish: in a notebook one line per test (the returned result
    then renders as a table), elsewhere pytest's own report."""
    function = _contract_name(function)
    if ADAPTERS[function].entry_point:  # its drills carry its tests (TA trial 11 read pytest's --function advice)
        drills = ADAPTERS[function].drills
        raise ValueError(f"{function} has no tests of its own: it is tested through {', '.join(drills)}; "
                         f"run check({drills[0]!r})" + "".join(f" or check({d!r})" for d in drills[1:]))
    import pytest

    root = project_root()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    fresh_imports(root)
    target = os.environ.get("HARNESS_ADAPTERS") or "adapters"
    if impl is not None:
        sys.modules[STAND_IN] = _stand_in(function, impl, target)
        target = STAND_IN
    result = CheckResult(function)
    args = [str(root / "tests"), "--rootdir", str(root), "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
            "--capture=sys", "--color=no", "--adapters", target, "--function", function]
    notebook = not quiet and in_notebook()
    buffer = io.StringIO() if quiet or notebook else _Tee(sys.stdout)
    collector = _Collector(result, sys.stdout if notebook else None)
    saved = os.environ.pop("PYTEST_ADDOPTS", None)  # nothing from outside may add --hidden
    try:
        with contextlib.redirect_stdout(buffer):
            pytest.main(args, plugins=[collector])
    finally:
        if saved is not None:
            os.environ["PYTEST_ADDOPTS"] = saved
        sys.modules.pop(STAND_IN, None)
    result.report = buffer.getvalue()
    return result
