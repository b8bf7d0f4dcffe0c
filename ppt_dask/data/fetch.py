"""MNIST fetched when it is missing: from mirrors, checked, written atomically.

``datasets.mnist()`` (and so ``ppt-dask train mnist``) calls :func:`ensure_mnist`, which
finds the four gzip idx files, or downloads the missing ones:

* from the mirrors in ``PPT_DASK_MIRRORS`` (base URLs separated by spaces, each holding
  the four ``.gz`` files), else from :data:`DEFAULT_MIRRORS`, in order: a mirror that
  fails (unreachable, an HTTP error, a wrong file) passes the file to the next;
* into the data folder the user named (``data_dir``, ``--data-dir`` or ``PPT_DASK_DATA``),
  else into the per-user cache folder (:func:`user_cache_dir`);
* each file checked against the SHA-256 of its idx content (the bytes inside the gzip
  stream, :data:`MNIST_SHA256`): the gzip wrapping differs between mirrors (timestamps,
  compression level) while the idx bytes are the canonical ones. A file that does not
  match is refused and deleted;
* written to a temporary file beside the target, flushed to disk and renamed only once
  checked, so a half-written file never counts (an interrupted download leaves nothing);
* with :mod:`ppt_dask.progress`'s display: a bar per file on a terminal, a widget in a
  notebook, and one line per file that arrived (also in logs and pipes).

``offline=True`` (or ``PPT_DASK_OFFLINE=1``) only looks: missing files are an error
saying where they were looked for. The download itself is the standard library's (urllib).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path

MIRRORS_ENV = "PPT_DASK_MIRRORS"
OFFLINE_ENV = "PPT_DASK_OFFLINE"
CACHE_ENV = "XDG_CACHE_HOME"

# Public copies of LeCun and Cortes' files (torchvision's list; the original
# yann.lecun.com address now asks for a login).
DEFAULT_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)

# SHA-256 of the uncompressed, canonical idx files (the data README's
# SHA256SUMS.uncompressed: zcat FILE.gz | sha256sum).
MNIST_SHA256 = {
    "train-images-idx3-ubyte.gz": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte.gz": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte.gz": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte.gz": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
SUBDIR = "mnist"
TIMEOUT_SECONDS = 30.0  # per connection and per read: a stalled mirror passes to the next
_CHUNK = 1 << 16
_PART = ".part-"  # temporary files: NAME.part-XXXX beside NAME
_HOW = "pass --data-dir DIR or set PPT_DASK_DATA to a folder holding mnist/"


class FetchError(OSError):
    """No mirror gave a good copy of a file (the message says what each one did)."""


def user_cache_dir() -> Path:
    """The per-user cache folder: ``$XDG_CACHE_HOME/ppt_dask``, else ``~/.cache/ppt_dask``."""
    base = os.environ.get(CACHE_ENV) or Path.home() / ".cache"
    return Path(base).expanduser() / "ppt_dask"


def mirrors_from_env() -> list[str]:
    """The mirrors to try, in order: ``PPT_DASK_MIRRORS`` (split on spaces) or the defaults."""
    text = os.environ.get(MIRRORS_ENV, "")
    found = text.split() or list(DEFAULT_MIRRORS)
    bad = [m for m in found if not m.startswith(("http://", "https://", "file://"))]
    if bad:
        raise ValueError(f"{MIRRORS_ENV}: not a base URL: {' '.join(bad)} "
                         "(expected http://, https:// or file:// addresses separated by spaces)")
    return found


def offline_from_env() -> bool:
    return os.environ.get(OFFLINE_ENV, "") not in ("", "0")


def missing_files(folder: Path) -> list[str]:
    """The MNIST files not (yet) in ``folder / "mnist"``."""
    return [name for name in MNIST_SHA256 if not (Path(folder) / SUBDIR / name).is_file()]


def fetch_file(name: str, folder: Path, mirrors, *, progress=None,
               timeout: float = TIMEOUT_SECONDS) -> Path:
    """Download ``name`` into ``folder / "mnist"`` from the first mirror that gives a good copy.

    Returns the file's path. Raises :class:`FetchError` naming every mirror and what it
    did when none did; nothing is left behind in that case, nor when interrupted.
    """
    target_dir = Path(folder) / SUBDIR
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / name
    failures = []
    for mirror in mirrors:
        url = mirror.rstrip("/") + "/" + name
        try:
            _download(url, target, MNIST_SHA256[name], progress, timeout)
            return target
        except (OSError, ValueError, zlib.error, http.client.HTTPException) as exc:  # try the next
            failures.append(f"{url}: {_reason(exc)}")
    raise FetchError(f"could not fetch mnist/{name}: " + "; ".join(failures)
                     + f". Set {MIRRORS_ENV} to mirrors that hold it, or put the file in {target_dir} "
                     f"({_HOW})")


def _reason(exc: Exception) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return f"unreachable ({exc.reason})"
    return str(exc) or type(exc).__name__


def _download(url: str, target: Path, sha256: str, progress, timeout: float) -> None:
    """Stream ``url`` to a temporary file beside ``target``; rename it once checked."""
    fd, part = tempfile.mkstemp(prefix=target.name + _PART, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip
            digest = hashlib.sha256()
            done = 0
            if progress:
                progress.start(target.name, url, total)
            while chunk := response.read(_CHUNK):
                out.write(chunk)
                digest.update(inflater.decompress(chunk))
                done += len(chunk)
                if progress:
                    progress.update(done)
            if total is not None and done != total:
                raise ValueError(f"the download ended after {done} of {total} bytes")
            if not inflater.eof:
                raise ValueError(f"truncated gzip file ({done} bytes)")
            digest.update(inflater.flush())
            if digest.hexdigest() != sha256:
                raise ValueError(f"SHA-256 of the content is {digest.hexdigest()}, expected "
                                 f"{sha256}: refused and deleted")
            out.flush()
            os.fsync(out.fileno())
        os.chmod(part, 0o644)  # mkstemp makes it private; a data file is for every reader
        os.replace(part, target)  # atomic: the name appears only with the whole, checked file
        if progress:
            progress.finish(done)
    except BaseException:  # an error, a bad file or Ctrl-C: the partial file goes
        if progress:
            progress.abandon()
        Path(part).unlink(missing_ok=True)
        raise


def ensure_mnist(candidates, target=None, *, offline=None, mirrors=None, progress=None) -> Path:
    """The folder holding the four MNIST files, after fetching the missing ones.

    Parameters
    ----------
    candidates : list of Path
        Folders to look in, in order; the first holding all four files is the answer.
    target : Path, optional
        Where to fetch into when none holds them (default: the first candidate).
    offline : bool, optional
        Only look (default: ``PPT_DASK_OFFLINE``); missing files raise FileNotFoundError.
    mirrors : list of str, optional
        Base URLs (default: :func:`mirrors_from_env`).
    """
    candidates = [Path(c) for c in candidates]
    for folder in candidates:
        if not missing_files(folder):
            return folder
    target = Path(target) if target is not None else candidates[0]
    missing = missing_files(target)
    offline = offline_from_env() if offline is None else offline
    if offline:
        raise FileNotFoundError(
            f"MNIST files missing in {target / SUBDIR}: {', '.join(missing)} (looked in "
            f"{', '.join(str(c) for c in candidates)}); offline, so not fetched: "
            f"{_HOW}, or allow fetching (unset {OFFLINE_ENV})")
    mirrors = mirrors_from_env() if mirrors is None else list(mirrors)
    if progress is None:
        from ppt_dask.progress import Download  # tqdm: a bar on a terminal, a widget in a notebook

        progress = Download()
    for name in missing:
        fetch_file(name, target, mirrors, progress=progress)
    return target
