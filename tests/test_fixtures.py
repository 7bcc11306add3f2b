"""Every fixture case of the term: outputs, gradients, must-raise inputs and training runs.

The cases are data (fixtures/<term>/manifest.json); the plugin parametrises
`fixture_check` with one (case, check) pair per check. A training run's held-out loss is
computed with `held_out_forward` (the plugin's: in grading, the driver's own forward).
"""

from harness.student_run.checks import CHECKS


def test_fixture(fixture_check, adapters, term, held_out_forward):
    case, check = fixture_check
    if check == "train":
        CHECKS[check](adapters, term, case, forward=held_out_forward)
    else:
        CHECKS[check](adapters, term, case)
