"""A missing system component skips its test with the reason, and fails it under CI."""

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

NEEDS = '''
import system

def test_needs_a_component():
    system.missing("no frobnicator here (apt-get install frobnicator)")
'''


def _pytest(tmp_path, ci):
    (tmp_path / "test_needs.py").write_text(NEEDS)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    if ci:
        env["CI"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider",
                           str(tmp_path / "test_needs.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_skipped_with_the_reason_in_the_summary(tmp_path):
    run = _pytest(tmp_path, ci=False)
    assert run.returncode == 0, run.stdout
    assert "1 skipped" in run.stdout
    assert "SKIPPED" in run.stdout and "no frobnicator here" in run.stdout and ".ci/run" in run.stdout


def test_under_ci_it_fails(tmp_path):
    run = _pytest(tmp_path, ci=True)
    assert run.returncode == 1, run.stdout
    assert "1 failed" in run.stdout and "no frobnicator here" in run.stdout
