"""Hypothesis profiles, loaded by `tests/conftest.py` before any test.

The default "ci" profile is derandomized: every run draws the same fixed
set of cases, so a failure reproduces and JAX compiles the same shapes each
time. `HYPOTHESIS_PROFILE=nightly` draws new cases on each run, ten times
as many (for a scheduled, longer run). `tests/mutants.py` loads "mutants":
the "ci" cases without shrinking a failure.
"""

import os

from hypothesis import Phase
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("nightly", derandomize=False, deadline=None)
# tests/mutants.py: a planted bug fails many property tests at once, and
# shrinking each failure would take longer than the rest of the suite.
settings.register_profile(
    "mutants",
    derandomize=True,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def examples(count: int) -> settings:
    """Settings for `count` cases (ten times as many in the nightly profile).

    Each test gives its own count: a compile per drawn shape makes some
    cases dear.
    """
    if settings.get_current_profile_name() == "nightly":
        count *= 10
    return settings(max_examples=count)
