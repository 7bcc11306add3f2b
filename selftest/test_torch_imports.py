"""The stand-ins that keep torch from importing its compiler's machinery (harness/torch_imports.py):
a student run imports neither sympy nor torch._dynamo, each stand-in answers plain values exactly
as torch's own code does, and anything else reaches the real module. Each test runs in a fresh
interpreter, since what a process has imported cannot be taken back."""

import subprocess
import sys
import textwrap

from conftest import PROJECT


def _python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=PROJECT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


def test_a_student_run_imports_neither_sympy_nor_dynamo_nor_beartype():
    out = _python("""
        import sys, pytest
        code = pytest.main(["-q", "-p", "no:cacheprovider", "--adapters", "reference.adapters",
                            "--function", "run_embedding,run_softmax,run_transformer_lm,run_adamw_steps"])
        print(int(code), *(name in sys.modules for name in ("sympy", "torch._dynamo", "beartype")))
    """)
    assert out.splitlines()[-1] == "0 False False False"


def test_the_stand_in_answers_plain_values_as_torch_does():
    out = _python("""
        import itertools, torch
        import harness.torch_imports as stand_in
        import torch.fx.experimental.symbolic_shapes as real
        bools, ints = [True, False], [0, 1, 7]
        calls = {"expect_true": [(b,) for b in bools], "guard_or_false": [(b,) for b in bools],
                 "guard_or_true": [(b,) for b in bools], "guard_size_oblivious": [(b,) for b in bools],
                 "statically_known_true": [(b,) for b in bools], "guarding_hint_or_throw": [(v,) for v in bools + ints],
                 "has_guarding_hint": [(v,) for v in bools + ints + [1.5]], "is_nested_int": [(v,) for v in ints],
                 "sym_and": list(itertools.product(bools, repeat=3)), "sym_or": list(itertools.product(bools, repeat=3)),
                 "sym_eq": [(1, 1), (1, 2), ((1, 2), (1, 2)), ((1, 2), [1, 3]), ((1,), (1, 2))]}
        for name, arguments in calls.items():
            for args in arguments:
                assert getattr(stand_in, name)(*args) == getattr(real, name)(*args), (name, args)
        for name in ("expect_true", "guard_or_false", "statically_known_true"):  # torch refuses a non-bool
            for bad in (1, None):
                try:
                    getattr(real, name)(bad)
                except Exception as e:
                    refused = type(e)
                else:
                    refused = None
                try:
                    getattr(stand_in, name)(bad)
                except Exception as e:
                    assert type(e) is refused, (name, bad)
                else:
                    assert refused is None, (name, bad)
        print("same")
    """)
    assert out == "same"


def test_anything_else_reaches_the_real_modules():
    out = _python("""
        import sys, torch
        from harness.torch_imports import SYMBOLIC, concrete_symbolic_shapes, meta_kernels_lean
        concrete_symbolic_shapes()
        torch._check(True)
        x = torch.ones(3).to("meta")
        with meta_kernels_lean():
            (x + 1) * 2
            import sympy
            assert not isinstance(x, sympy.Basic) and "sympy" not in sys.modules or sys.modules["sympy"] is sympy
            print("before", "sympy" in sys.modules and type(sys.modules["sympy"]).__name__)
            n = sympy.Integer(3)          # a name the stand-in does not answer: the real sympy
            assert isinstance(n, sympy.Basic)
        print("after", type(sys.modules["sympy"]).__name__, "stands in" in (sys.modules[SYMBOLIC].__doc__ or ""))
        shape_env = sys.modules[SYMBOLIC].ShapeEnv()   # likewise for the symbolic shapes
        print("real", "stands in" in (sys.modules[SYMBOLIC].__doc__ or ""), type(shape_env).__name__)
    """)
    assert out.splitlines() == ["before _NoSympy", "after module True", "real False ShapeEnv"]


def test_a_grading_worker_imports_no_sympy_before_the_submission_runs():
    """The zygote's warm-up runs a gradient with a cotangent, whose shape check would import sympy (0.5 s of
    every graded submission's CPU) but for the stand-in, as in a student's run."""
    from harness.grading.sandbox import Protections, Sandbox, remove_tree
    sandbox = Sandbox(PROJECT, Protections(bwrap=None, uid_drop=False), 0, 1024, 60)
    try:
        out = _python(f"""
            import sys
            sys.path[:0] = [{str(sandbox.lib.parent)!r}]
            from harness.grading.worker import _warm_up
            _warm_up()
            print(*(name in sys.modules for name in ("sympy", "torch._dynamo")))
        """)
    finally:
        remove_tree(sandbox.root)
    assert out.splitlines()[-1] == "False False"
