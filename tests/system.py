"""Tests that need a part of the system (sshd, chromium, tc): skip with the reason, or fail.

On a developer's machine a missing component skips the test and says why (pytest's
summary lists it, see ``-rs`` in pyproject.toml). When the environment variable ``CI`` is
set (``.ci/run`` installs every component) a missing one fails the test instead, so CI
still proves what the skips leave out.
"""

import os

import pytest

FULL_SET = "bash .ci/run installs it and runs the whole suite"


def missing(reason: str) -> None:
    """Skip (or, under CI, fail) the calling test because ``reason``."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this is a failure)", pytrace=False)
    pytest.skip(f"{reason}; {FULL_SET}")


def needs_module(name: str, install: str) -> None:
    """At the top of a test module: skip the module (or, under CI, fail) when the optional
    package ``name`` is not installed; ``install`` says how to get it."""
    import importlib.util

    if importlib.util.find_spec(name) is None:
        reason = f"{name} is not installed ({install})"
        if os.environ.get("CI"):
            raise ImportError(f"{reason} (CI is set, so this is a failure)")
        pytest.skip(f"{reason}; {FULL_SET}", allow_module_level=True)
