"""Before an ssh cluster starts: every host answers over ssh, and its Python imports ppt_dask.

SSHCluster starts the scheduler, then the workers, and when one host of many is wrong it
fails late (after its own timeouts) and with the whole host list in its message. This asks
each distinct host first, all at once, the way ``ssh HOST PYTHON -c 'import ppt_dask'``
would, and names each host that does not answer or cannot import the package, in one line,
before any process of the cluster is started:

    10.0.0.13: ssh: connection refused on port 22; 10.0.0.12: /usr/bin/python3 has no ppt_dask

Nothing here imports dask; asyncssh (the ``deploy`` extra, which SSHCluster needs anyway)
is imported when a check runs, by :func:`import_asyncssh`: its import warns on stderr with
recent releases of cryptography (``CryptographyDeprecationWarning: DSA is deprecated``, from
asyncssh's own modules), a line that is not ours and would stand above our one-line errors.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import shlex
import warnings
from pathlib import Path

from ppt_dask.core.validation import error_line

PROBE = "import ppt_dask, distributed; print(ppt_dask.__version__)"  # distributed too: the workers need it


def check_hosts(hosts: list[str], python: str | list[str], connect_options: dict | list[dict],
                timeout: float = 30.0) -> dict[str, str]:
    """Ask every host, at once, to import ppt_dask with ``python``; return each host's
    ppt_dask version.

    ``python`` and ``connect_options`` are one for all hosts or one per host (lists as long
    as ``hosts``: another length is a :class:`ValueError`). Raises :class:`RuntimeError` with
    one line naming every host that failed (no ssh answer within ``timeout`` seconds, ssh
    refused, authentication or the host key refused, the Python missing, or ppt_dask not
    importable there).
    """
    pythons = _per_host("python", python, hosts)
    options = _per_host("connect_options", connect_options, hosts)
    asks, seen = [], set()
    for host, py, opts in zip(hosts, pythons, options):
        key = (host, py, repr(sorted((opts or {}).items())))
        if key not in seen:  # a host named twice (several workers) is asked once
            seen.add(key)
            asks.append((host, py, dict(opts or {})))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # its own event loop: a notebook has one running
        answers = pool.submit(asyncio.run, _ask_all(asks, timeout)).result(timeout=timeout + 30)
    failed = [f"{host}: {problem}" for (host, _, _), (_, problem) in zip(asks, answers) if problem]
    if failed:
        raise RuntimeError("; ".join(failed))
    return {host: version for (host, _, _), (version, _) in zip(asks, answers)}


def _per_host(name: str, value, hosts: list[str]) -> list:
    """``value`` for each host: a list as long as ``hosts`` (a shorter or longer one is refused,
    never cut to fit), or one value for all."""
    if not isinstance(value, (list, tuple)):
        return [value] * len(hosts)
    if len(value) != len(hosts):
        raise ValueError(f"{name}: one per host ({len(hosts)} hosts: {', '.join(hosts)}), got {len(value)}")
    return list(value)


def import_asyncssh():
    """``asyncssh``, imported with the known warnings of its import silenced: cryptography's
    deprecation warnings raised from within asyncssh's modules (DSA, at cryptography 51), and
    nothing else (a warning of another module, or of ours, still shows). Once imported, later
    imports (SSHCluster's own) find it in ``sys.modules`` and warn no more."""
    with warnings.catch_warnings():
        try:
            from cryptography.utils import CryptographyDeprecationWarning
        except ImportError:  # an asyncssh without cryptography: nothing of it to silence
            pass
        else:
            warnings.filterwarnings("ignore", category=CryptographyDeprecationWarning, module=r"asyncssh(\.|$)")
        import asyncssh
    return asyncssh


async def _ask_all(asks: list, timeout: float) -> list:
    return await asyncio.gather(*(_ask(host, python, options, timeout) for host, python, options in asks))


async def _ask(host: str, python: str, options: dict, timeout: float) -> tuple[str | None, str | None]:
    """``(the host's ppt_dask version, None)``, or ``(None, what went wrong there in a few words)``."""
    asyncssh = import_asyncssh()

    port = options.get("port", 22)
    try:
        async with asyncio.timeout(timeout):
            async with asyncssh.connect(host, **options) as conn:
                run = await conn.run(f"{shlex.quote(python)} -c {shlex.quote(PROBE)}", check=False,
                                     stdin=asyncssh.DEVNULL)
    except TimeoutError:
        return None, f"no ssh answer within {timeout:g} s (port {port})"
    except ConnectionRefusedError:
        return None, f"ssh: connection refused on port {port}"
    except asyncssh.PermissionDenied as exc:
        return None, f"ssh: {error_line(exc)} on port {port} (the user and key: --ssh-user, --ssh-key)"
    except asyncssh.HostKeyNotVerifiable as exc:
        return None, f"ssh: {error_line(exc)} on port {port} (the hosts' keys: --known-hosts)"
    except (OSError, asyncssh.Error) as exc:
        return None, f"ssh: {error_line(exc)} (port {port})"
    if run.exit_status == 127:
        return None, f"no Python at {python} (name the hosts' Python: --python)"
    if run.exit_status != 0:
        said = _last_line(str(run.stderr or ""))
        if "No module named 'ppt_dask'" in said or "No module named 'distributed'" in said:
            return None, f"{python} has no ppt_dask (install it there, or name the Python that has it: --python)"
        return None, f"{python} could not import ppt_dask: {said or f'exit status {run.exit_status}'}"
    return str(run.stdout or "").strip() or "?", None


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def read_hostfile(path) -> list[str]:
    """Host names, one per line (the format of ``dask ssh --hostfile``); ``#`` starts a comment."""
    hosts = []
    for line in Path(path).expanduser().read_text().splitlines():
        words = line.split("#", 1)[0].split()
        hosts.extend(words)
    if not hosts:
        raise ValueError(f"host file {str(path)!r} names no host")
    return hosts
