"""A `pytest` command ends as soon as its last exit handler has run: the interpreter's teardown of torch's
modules (half a second of a bare `import torch`) is skipped, while the exit status, the last line of output
and every other exit handler (logging's flush, coverage's save) are kept. In-process runs live on."""

import subprocess
import sys
import textwrap

from conftest import PROJECT

# A plugin standing for a tool that saves at exit (coverage), and for a file object that only the interpreter's
# teardown closes (what a fast exit gives up: a plugin that neither closes nor flushes what it writes).
PLUGIN = """
import atexit, sys
def _save():
    with open({marker!r}, "w") as f:
        f.write("saved")
def pytest_configure(config):
    atexit.register(_save)
UNFLUSHED = open({marker!r} + ".teardown", "w")  # written out only when the interpreter tears it down
UNFLUSHED.write("torn down")
"""


def _console(tmp_path, *args):
    (tmp_path / "saver_plugin.py").write_text(PLUGIN.format(marker=str(tmp_path / "saved")))
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "saver_plugin",
                           "--function", "run_embedding", *args], cwd=PROJECT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_console_run_keeps_its_status_output_and_exit_handlers_but_skips_the_teardown(tmp_path):
    passed = _console(tmp_path, "--adapters", "reference.adapters")
    assert passed.returncode == 0 and passed.stdout.strip().splitlines()[-1].startswith("18 passed"), passed.stdout[-2000:]
    assert (tmp_path / "saved").read_text() == "saved"
    assert (tmp_path / "saved.teardown").read_text() == ""
    (tmp_path / "saved").unlink()
    failed = _console(tmp_path)  # the stubs
    assert failed.returncode == 1 and " failed" in failed.stdout, failed.stdout[-2000:]
    assert (tmp_path / "saved").read_text() == "saved"


def test_a_traced_run_ends_as_python_ends_it(tmp_path):
    """A tracer or profiler (coverage, cProfile) may write its data after pytest returns: no shortcut."""
    (tmp_path / "traced.py").write_text(textwrap.dedent("""
        import sys, pytest
        sys.settrace(lambda *a: None)
        sys.argv[0] = "pytest"
        raise SystemExit(pytest.main())
    """))
    (tmp_path / "saver_plugin.py").write_text(PLUGIN.format(marker=str(tmp_path / "saved")))
    done = subprocess.run([sys.executable, str(tmp_path / "traced.py"), "-q", "-p", "no:cacheprovider", "-p",
                           "saver_plugin", "--function", "run_embedding", "--adapters", "reference.adapters"],
                          cwd=PROJECT, env={"PYTHONPATH": f"{tmp_path}:{PROJECT}", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (tmp_path / "saved").read_text() == "saved" and (tmp_path / "saved.teardown").read_text() == "torn down"
