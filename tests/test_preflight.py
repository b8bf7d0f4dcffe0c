"""deploy/preflight.py without an ssh server: the ssh call (``asyncssh.connect``) is replaced
by one that runs the command in a local shell, as sshd runs it on the host, or fails as ssh
fails (no answer, refused, authentication, an unknown host key). What each host's Python then
does is real: a missing Python exits 127, a Python without ppt_dask, one whose ppt_dask fails to
import, one with another version. The real sshd is tests/test_deploy.py's (marker ssh)."""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace

import pytest

import ppt_dask
from ppt_dask.deploy import preflight, ssh

asyncssh = preflight.import_asyncssh()  # as the package imports it: cryptography's DSA warnings of its import silenced


class _Session:
    """What ``asyncssh.connect(host, ...)`` gives for one host (see :func:`_ssh`)."""

    def __init__(self, host: str, how: str):
        self.host, self.how = host, how

    async def __aenter__(self):
        if self.how == "silent":  # a host that never answers: the check's own timeout ends the wait
            await asyncio.sleep(3600)
        if self.how == "refused":
            raise ConnectionRefusedError(111, "Connect call failed")
        if self.how == "denied":
            raise asyncssh.PermissionDenied("Permission denied")
        if self.how == "unknown key":
            raise asyncssh.HostKeyNotVerifiable(f"Host key is not trusted for host {self.host}")
        return self

    async def __aexit__(self, *exc):
        return False

    async def run(self, command: str, check: bool = False, stdin=None):
        # in a folder of no package (sshd starts in the user's home; `python -c` looks in the
        # current folder first: the repository's would hold ppt_dask)
        proc = await asyncio.create_subprocess_shell(command, stdout=asyncio.subprocess.PIPE, cwd="/",
                                                     stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
        out, err = await proc.communicate()
        return SimpleNamespace(exit_status=proc.returncode, stdout=out.decode(), stderr=err.decode())


@pytest.fixture
def ssh_to(monkeypatch):
    """``ssh_to({"h1": "run", "h2": "refused"})``: how each host answers; the hosts asked, in order."""
    asked: list = []

    def install(behaviour: dict):
        def connect(host, **options):
            asked.append((host, options))
            return _Session(host, behaviour[host])
        monkeypatch.setattr(asyncssh, "connect", connect)
        return asked
    return install


def _python(tmp_path, name: str, package: str | None = None) -> str:
    """A host's Python: this one, with a folder first on its path that holds ``package`` as
    ppt_dask's ``__init__.py`` (None: this Python as it is)."""
    if package is None:
        return sys.executable
    site = tmp_path / name
    (site / "ppt_dask").mkdir(parents=True)
    (site / "ppt_dask" / "__init__.py").write_text(package)
    script = tmp_path / f"{name}.sh"
    script.write_text(f'#!/bin/sh\nexport PYTHONPATH={site}\nexec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_every_host_answers_and_repeated_hosts_are_asked_once(ssh_to, tmp_path):
    asked = ssh_to({"h1": "run", "h2": "run"})
    versions = preflight.check_hosts(["h1", "h2", "h2", "h1"], sys.executable, {"port": 2222, "username": "u"})
    assert versions == {"h1": ppt_dask.__version__, "h2": ppt_dask.__version__}
    assert asked == [("h1", {"port": 2222, "username": "u"}), ("h2", {"port": 2222, "username": "u"})]


def test_a_host_that_does_not_answer_is_named_once_the_timeout_is_over(ssh_to):
    ssh_to({"h1": "silent"})
    with pytest.raises(RuntimeError, match=r"^h1: no ssh answer within 0\.5 s \(port 2200\)$"):
        preflight.check_hosts(["h1"], sys.executable, {"port": 2200}, timeout=0.5)


def test_each_way_a_host_fails_is_named_in_one_line_in_the_hosts_order(ssh_to, tmp_path):
    hosts = ["refused", "denied", "unknown", "nopython", "noppt", "broken", "good"]
    ssh_to({"refused": "refused", "denied": "denied", "unknown": "unknown key",
            **{h: "run" for h in ("nopython", "noppt", "broken", "good")}})
    broken = _python(tmp_path, "broken", "raise ImportError('libgfortran.so.5: cannot open shared object file')")
    noppt = tmp_path / "noppt.sh"  # a Python without site-packages: neither ppt_dask nor distributed
    noppt.write_text(f'#!/bin/sh\nunset PYTHONPATH\nexec {sys.executable} -S "$@"\n')
    noppt.chmod(0o755)
    pythons = [sys.executable] * 3 + [str(tmp_path / "nowhere" / "python3"), str(noppt), broken, sys.executable]
    with pytest.raises(RuntimeError) as raised:
        preflight.check_hosts(hosts, pythons, {}, timeout=120)
    assert str(raised.value).split("; ") == [
        "refused: ssh: connection refused on port 22",
        "denied: ssh: Permission denied on port 22 (the user and key: --ssh-user, --ssh-key)",
        "unknown: ssh: Host key is not trusted for host unknown on port 22 (the hosts' keys: --known-hosts)",
        f"nopython: no Python at {tmp_path / 'nowhere' / 'python3'} (name the hosts' Python: --python)",
        f"noppt: {noppt} has no ppt_dask (install it there, or name the Python that has it: --python)",
        f"broken: {broken} could not import ppt_dask: ImportError: libgfortran.so.5: cannot open shared object file",
    ]


def test_per_host_lists_of_another_length_are_refused_not_cut(ssh_to):
    asked = ssh_to({"h1": "run", "h2": "run", "h3": "run"})
    with pytest.raises(ValueError, match=r"^python: one per host \(3 hosts: h1, h2, h3\), got 2$"):
        preflight.check_hosts(["h1", "h2", "h3"], [sys.executable] * 2, {})
    with pytest.raises(ValueError, match=r"^connect_options: one per host \(3 hosts: h1, h2, h3\), got 4$"):
        preflight.check_hosts(["h1", "h2", "h3"], sys.executable, [{}] * 4)
    assert asked == []  # refused before any host is asked


def test_a_host_with_another_version_is_warned_of_and_the_cluster_goes_on(ssh_to, tmp_path):
    ssh_to({"h1": "run", "h2": "run"})
    other = _python(tmp_path, "other", "__version__ = '0.0.1'\n")
    with pytest.warns(RuntimeWarning, match=rf"^ppt_dask differs on the hosts: h2 has 0\.0\.1, this process "
                                            rf"{ppt_dask.__version__}$"):
        ssh._preflight(["h1", "h2"], [sys.executable, other], {}, timeout=120)


def test_the_cluster_is_not_started_when_a_host_fails(ssh_to):
    ssh_to({"h1": "run", "h2": "refused"})
    with pytest.raises(RuntimeError, match=r"^the ssh cluster was not started: h2: ssh: connection refused on port 22"):
        ssh._preflight(["h1", "h2"], None, None, timeout=120)


def test_asyncssh_is_imported_without_the_warnings_of_its_dependencies():
    """asyncssh imported the way the checks and the ssh cluster import it writes nothing on
    stderr, with the newest releases (cryptography 51 warns ``DSA is deprecated`` from within
    asyncssh's modules at its import: a line above ppt-dask's one-line errors, not ours)."""
    import subprocess
    import sys

    code = ("from ppt_dask.deploy.preflight import import_asyncssh; import_asyncssh(); "
            "import distributed.deploy.ssh, asyncssh")
    run = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stderr == "", run.stderr
