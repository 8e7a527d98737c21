"""Loads the fuzz suite's Hypothesis profile (fuzzing.py: "ci" by default, HYPOTHESIS_PROFILE=long)."""

import fuzzing  # noqa: F401 - registers and loads the profile before any test is collected
