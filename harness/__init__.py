"""Test harness for the transformer-from-scratch assignment.

Shipped to students (the release):
contract   the adapter functions students implement, declared once with their points,
           tolerance and stub; renders adapters.py and the student/ stubs
runtime    loads an adapters module and checks every call against the contract
store      reads a fixture term (safetensors + JSON), the pinned term
paths      the leaf-path convention for tensor arguments ("arg", "arg/key")
plugin     the pytest plugin: options, case parametrisation, readable failures
progress   the progress table at the end of a run
notebook   check one function from a notebook or REPL, in-process, with fresh imports
checks     the output, gradient, must-raise and not-mutated checks of a fixture case
compare    compares outputs and gradients and writes the failure report
diagnose   names a known mistake when a result matches its stored fingerprint
probes     checks that need no fixture: allocation size, meta device
cli        `python -m harness`: term list and contract (a release has only these)

Instructor only (left out of the release):
catalogue  the fixture cases, as data
rules      the rules the public cases keep (every argument varied, large spreads), from the contract
build      builds a term from the reference and verifies one
suite      runs the student suite in-process and collects what each test said
coverage   the mistake-coverage table and MISTAKES.md
release    writes the student edition
grade      batch grading: vets submissions, runs drivers, writes results and grades.csv
drive      the trusted driver: the official suite against one submission's worker
remote     the driver's side of a worker: adapter calls, gradients and modules as data
sandbox    the bubblewrap confinement of a submission's worker processes
worker     the untrusted side: the only process that imports a submission's code
wire       the driver-worker message format (JSON + safetensors, no pickle)
"""
