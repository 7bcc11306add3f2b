"""Test harness for the transformer-from-scratch assignment.

Shipped to students (the release):
contract   the adapter functions students implement, declared once with their points,
           tolerance and stub; renders adapters.py and the student/ stubs
runtime    loads an adapters module and checks every call against the contract
store      reads a fixture term (safetensors + JSON), the pinned term
paths      the leaf-path convention for tensor arguments ("arg", "arg/key")
plugin     the pytest plugin: options, case parametrisation, readable failures
progress   the progress table at the end of a run
scoring    how a function's points split over its tests (the grader's rule, shared with the table)
notebook   check one function from a notebook or REPL, in-process, with fresh imports
checks     the output, gradient, must-raise and not-mutated checks of a fixture case
compare    compares outputs and gradients and writes the failure report
diagnose   names a known mistake when a result matches its stored fingerprint
probes     checks that need no fixture: allocation size, meta device
cli        `python -m harness`: term list and contract (a release has only these)

Instructor only (left out of the release):
catalogue  the fixture cases, as data
case_rules  the rules the catalogue keeps (distinct axis sizes, every argument varied, large
            spreads), derived from the contract; checked at term new and contract --check
build      builds a term from the reference and verifies one
suite      runs the student suite in-process and collects what each test said
coverage   the mistake-coverage table and MISTAKES.md
release    writes the student edition
grading/   the grading subsystem: a trusted driver, a confined worker, data on the wire
           (its __init__ maps it)
"""
