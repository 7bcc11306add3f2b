"""Every function runs on `meta` tensors: no table or mask is made on the CPU inside a call.

Only a device mix fails. Data-dependent reads that meta tensors cannot answer (an id
range check, .item()) are correct code and are not penalised.

A function is probed with the arguments of its first public fixture case that it passes
on the CPU, every tensor moved to `meta` (one that passes none is not judged, and fails),
so a new function is probed as soon as the term has a case for it.
Module builders (get_*) have no fixture cases: they are built with the sizes below.
"""

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

from harness.checks import CHECKS
from harness.contract import ADAPTERS
from harness.probes import run_on_meta

FUNCTIONS = [name for name, a in ADAPTERS.items() if a.signature.return_annotation is not torch.nn.Module]


MODULE_CALLS = {  # builder, and the shape of the ids its forward takes
    "get_embedding": (lambda a: a.get_embedding(16, 4), (2, 3)),
    "get_sinusoidal_positions": (lambda a: a.get_sinusoidal_positions(64, 16), (5,)),
    "get_transformer_lm": (lambda a: a.get_transformer_lm(20, 8, 8, 2, 2, 12, 10000.0), (2, 5)),
    "get_gpt2_lm": (lambda a: a.get_gpt2_lm(20, 8, 8, 2, 2, 12), (2, 5)),
}


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


def on_meta(tree):
    return tree_map(lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t, tree)


def left_on_another_device(out) -> list[str]:
    return [str(t.device) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.device.type != "meta"]


@pytest.mark.reports_only  # the device watcher runs in the code's own process
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.adapter(n)) for n in FUNCTIONS])
def test_function_runs_on_meta_device(adapters, term, name):
    cases = [c for c in term.cases if c.function == name and not c.hidden and c.check == "output"]
    if not cases:  # a term built before the function existed; the selftest requires cases in new terms
        pytest.skip(f"term {term.name} has no public case of {name} to probe it with")
    failures = []
    for case in cases:  # only code that works on the CPU is judged on devices: a CPU bug is charged once
        if (failure := _cpu_failure(adapters, term, case)) is None:
            break
        failures.append(failure)
    else:
        raise AssertionError(f"not judged: {name} passes none of its {len(cases)} public cases on the CPU (case "
                             f"{cases[0].name!r}: {failures[0][:300]}). Fix the CPU failures first; this test "
                             "then checks devices only")
    kwargs = term.inputs(case)
    out = run_on_meta(getattr(adapters, name), **on_meta(kwargs))
    assert not left_on_another_device(out), f"{name} returned tensors on {left_on_another_device(out)}, " \
                                            "not the inputs' device"


@pytest.mark.reports_only  # the module lists its own tensors; the watcher runs in its process
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.adapter(n)) for n in MODULE_CALLS])
def test_module_moves_to_meta_device(adapters, name):
    build, shape = MODULE_CALLS[name]
    module = build(adapters)
    module(torch.zeros(shape, dtype=torch.long))  # on the CPU first: only code that works is judged on devices
    module = module.to("meta")
    left_behind = [n for n, t in [*module.named_parameters(), *module.named_buffers()] if t.device.type != "meta"]
    assert not left_behind, f".to('meta') did not move {left_behind}: register tables with register_buffer"
    out = run_on_meta(module, torch.zeros(shape, dtype=torch.long, device="meta"))
    assert not left_on_another_device(out)
