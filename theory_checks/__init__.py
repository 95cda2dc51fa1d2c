"""theory_checks."""
