"""The instructor's reference implementation. Stripped from the student release."""
