"""Test harness for the transformer-from-scratch assignment: the contract and the term's format
shared by three subsystems, the student run, the term and grading.

Shipped to students (the release):
contract   the adapter functions students implement, declared once with their points,
           tolerance and stub; renders adapters.py and the student/ stubs
store      a fixture term's files (safetensors + JSON): written by the term's build, read by
           the student run and by grading; the pinned term
paths      the leaf-path convention for tensor arguments ("arg", "arg/key")
runtime    loads an adapters module and checks every call against the contract
typecheck  the contract's jaxtyping annotations as checks: dtype kinds and named axes, bound per call
torch_imports  stand-ins that keep torch from importing its compiler's machinery (sympy, dynamo)
scoring    how a function's points split over its tests (the grader's rule, shared with the table)
student_run/  the student run: the pytest plugin, checks, diagnosis, probes, progress, check()
           (its __init__ maps it)
cli        `python -m harness`: term list and contract (a release has only these)

Instructor only (left out of the release):
term/      the term: catalogue, case rules, build, mistake coverage, release (its __init__ maps it)
grading/   the grading subsystem: a trusted driver, a confined worker, data on the wire
           (its __init__ maps it)
"""
