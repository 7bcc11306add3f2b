"""Every fixture case of the term: outputs, gradients and must-raise inputs.

The cases are data (fixtures/<term>/manifest.json); the plugin parametrises
`fixture_check` with one (case, check) pair per check.
"""

from harness.student_run.checks import CHECKS


def test_fixture(fixture_check, adapters, term):
    case, check = fixture_check
    CHECKS[check](adapters, term, case)
