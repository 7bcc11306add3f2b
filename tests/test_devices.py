"""Every function runs on `meta` tensors: no table or mask is made on the CPU inside a call.

Only a device mix fails. Data-dependent reads that meta tensors cannot answer (an id
range check, .item()) are correct code and are not penalised.

A function is probed with the arguments of its smallest public fixture case that it passes on
the CPU (by its fixture test's outcome in this run, else by running it here: the first that passes), every
tensor moved to `meta` (one that passes none is skipped: "not run: fix it on the CPU first";
a failure there would charge the CPU bug twice),
so a new function is probed as soon as the term has a case for it. A function that takes no
tensor has no input device: its tensors must be on torch's default device, as torch.arange's are.
Module builders (get_*) have no fixture cases: they are built with the arguments their adapter
declares (`example=` in harness/contract.py).
"""

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

from harness.student_run.checks import CHECKS
from harness.contract import ADAPTERS
from harness.student_run.probes import run_on_meta

# Entry points run through their drills; a training run (check "train") builds its own model and
# batches on the CPU, and its devices are its pieces': their own drills and cases probe them. So do the
# functions that declare why they have no probe (`no_device_probe` in harness/contract.py).
FUNCTIONS = [name for name, a in ADAPTERS.items()
             if not a.builder and not a.entry_point and a.check != "train" and not a.no_device_probe]
BUILDERS = [name for name, a in ADAPTERS.items() if a.builder]
IDS = (2, 3)  # what a built module's forward takes: ids or positions [batch, seq], all 0
# In one process when the suite runs in several (pytest --jobs): torch's meta kernels warm up once.
pytestmark = pytest.mark.together("meta device")


def _cpu_failure(adapters, term, case) -> str | None:
    """Why the function fails this case on the CPU (the first line of its report), or None."""
    try:
        CHECKS["output"](adapters, term, case)
    except (NotImplementedError, TimeoutError):
        raise  # unwritten or hanging code is reported as such, not as "not judged"
    except Exception as e:  # noqa: BLE001 - any failure here is the fixture tests' to report
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        said = next((line for line in lines if line.startswith(("output:", "output is"))), (lines or [""])[0])
        return f"{type(e).__name__}: {said}"
    return None


def _size(term, case) -> int:
    return sum(t.numel() for role, t in term.tensors(case).items() if role.startswith("in/"))


def on_meta(tree):
    return tree_map(lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t, tree)


def left_on_another_device(out) -> list[str]:
    return [str(t.device) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.device.type != "meta"]


@pytest.mark.reports_only  # the device watcher runs in the code's own process
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.adapter(n)) for n in FUNCTIONS])
def test_function_runs_on_meta_device(adapters, term, name, cpu_outcomes):
    # smallest first: meta kernels cost by the op (AdamW's 40 steps took 0.1 s, its 3-step case 5 ms)
    cases = sorted((c for c in term.cases if c.function == name and not c.hidden and c.check == "output"),
                   key=lambda c: _size(term, c))
    if not cases:  # a term built before the function existed; the selftest requires cases in new terms
        pytest.skip(f"term {term.name} has no public case of {name} to probe it with")
    # Only code that works on the CPU is judged on devices (a CPU bug is charged once): the smallest case
    # whose fixture test passed in this run (a device mix shows on any), else the smallest that passes here.
    passed = [c for c in cases if cpu_outcomes.get((name, c.name))]
    failures = []
    for case in passed[:1] or cases:
        if passed or (failure := _cpu_failure(adapters, term, case)) is None:
            break
        failures.append(failure)
    else:
        # A dependent check that cannot be judged is skipped, not failed: the CPU failures are the
        # fixture tests' to report, and the count of failures stays the real one (it carries no points).
        pytest.skip(f"not run: fix {name} on the CPU first (it passes none of its {len(cases)} public cases; "
                    f"case {cases[0].name!r}: {failures[0][:300]}); this test then checks devices only")
    kwargs = term.inputs(case)
    if not any(isinstance(t, torch.Tensor) for t in tree_flatten(kwargs)[0]):
        # No input device to follow: a caller picks the device by torch's default (`with torch.device(...)`).
        default = str(torch.get_default_device())
        out = getattr(adapters, name)(**kwargs)
        elsewhere = [str(t.device) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and str(t.device) != default]
        assert not elsewhere, f"{name} takes no tensor, so it has no input device to follow; it returned tensors " \
                              f"on {elsewhere}, not torch's default device ({default})"
        return
    # flags the glue reads as Python values stay on the CPU: meta tensors cannot answer them (host_flags)
    kwargs = {k: v if k in ADAPTERS[name].host_flags else on_meta(v) for k, v in kwargs.items()}
    out = run_on_meta(getattr(adapters, name), **kwargs)
    assert not left_on_another_device(out), f"{name} returned tensors on {left_on_another_device(out)}, " \
                                            "not the inputs' device"


@pytest.mark.reports_only  # the module lists its own tensors; the watcher runs in its process
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.adapter(n)) for n in BUILDERS])
def test_module_moves_to_meta_device(adapters, name):
    module = getattr(adapters, name)(**ADAPTERS[name].example)
    module(torch.zeros(IDS, dtype=torch.long))  # on the CPU first: only code that works is judged on devices
    module = module.to("meta")
    left_behind = [n for n, t in [*module.named_parameters(), *module.named_buffers()] if t.device.type != "meta"]
    assert not left_behind, f".to('meta') did not move {left_behind}: register tables with register_buffer"
    out = run_on_meta(module, torch.zeros(IDS, dtype=torch.long, device="meta"))
    assert not left_on_another_device(out)
