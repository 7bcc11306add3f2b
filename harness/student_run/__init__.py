"""The student run: what `pytest` and the notebook's check() do with a student's code.

plugin     the pytest plugin: options, case parametrisation, readable failures
parallel   a `pytest` command's tests split across forked processes, reported as one run
checks     the output, gradient, must-raise and not-mutated checks of a fixture case
compare    compares outputs and gradients and writes the failure report
diagnose   names a known mistake when a result matches its stored fingerprint
probes     checks that need no fixture: allocation size, meta device (the grading worker runs them too)
progress   the progress table at the end of a run
notebook   check one function from a notebook or REPL, in-process, with fresh imports
"""
