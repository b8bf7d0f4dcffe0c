"""The checks of every change (ruff, mypy) are configured once and run the same way in CI
(.ci/run) and before a commit (.pre-commit-config.yaml)."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_the_hooks_use_the_versions_the_dev_extra_pins():
    """A hook with another ruff than CI's would pass a commit that CI fails (or the reverse)."""
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    pins = dict(re.match(r"^([\w-]+)==(\S+)$", d).groups() for d in dev if "==" in d)
    hooks = {h["id"]: h for repo in yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"]
             for h in repo["hooks"]}
    assert set(hooks) == {"ruff", "mypy"} and set(pins) == {"ruff", "mypy"}
    for tool, version in pins.items():
        assert f"{tool}=={version}" in hooks[tool]["additional_dependencies"], (tool, hooks[tool])


def test_ci_runs_the_checks_and_every_test():
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^ruff check \.$", ci, re.M) and re.search(r"^mypy$", ci, re.M)
    # the linters' pins, torch for the TorchNet tests, and the docs' tools
    assert 'pip install ".[test,dev,torch,docs]"' in ci
    # the docs built before the tests with exactly the README's command (warnings as errors),
    # in an environment of their own that holds the [docs] extra alone
    readme = (ROOT / "README.md").read_text()
    command = 'pip install ".[docs]" && sphinx-build -n -W -b html docs docs/_build/html'
    assert command in readme.replace("\n", " ") and command in ci
    assert ci.index(command) < ci.index("python -m pytest")
    run = next(line for line in ci.splitlines() if line.startswith("python -m pytest"))
    assert '-m "slow or not slow"' in run and "--durations=20" in run
    # the default suite leaves out exactly the markers pyproject declares for long runs
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    declared = {m.split(":")[0] for m in config["markers"]}
    left_out = set(re.findall(r"not (\w+)", config["addopts"]))
    assert left_out == {"slow", "ssh", "browser", "slurm", "hosts"} <= declared


def test_mypy_checks_the_numpy_layers():
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert files == ["ppt_dask/core", "ppt_dask/algorithms"]
