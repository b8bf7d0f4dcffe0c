"""MNIST fetched by itself, against real HTTP servers on 127.0.0.1 (http.server in a thread).

The mirrors serve the real files from the data folder (../shared/data/mnist), a corrupted
copy, nothing (404), or the real files slowly (to interrupt a download). The oracle is
the data folder's own copy: what was fetched must hold the same idx bytes.
"""

import functools
import gzip
import hashlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ppt_dask.data import datasets, fetch, files

NAMES = list(fetch.MNIST_SHA256)
SMALL = "t10k-labels-idx1-ubyte.gz"  # 4.5 kB: the quick single-file cases


@pytest.fixture(scope="module")
def mnist_dir():
    return files.find_data_dir() / "mnist"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    requests = None  # a list shared by the server's handlers: the paths asked for

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.requests.append(self.path)
        super().do_GET()


class _Slow(_Quiet):
    """Sends each file in 64 kB pieces, 50 ms apart (a download that takes seconds)."""

    def copyfile(self, source, outputfile):
        while piece := source.read(1 << 16):
            outputfile.write(piece)
            outputfile.flush()
            time.sleep(0.05)


@pytest.fixture
def serve():
    """``serve(directory, slow=False) -> (base URL, requests)``; every server is shut down."""
    servers = []

    def start(directory, slow=False):
        requests = []
        handler = type("Handler", (_Slow if slow else _Quiet,), {"requests": requests})
        server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, directory=str(directory)))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/", requests

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _content_sha(path):
    return hashlib.sha256(gzip.decompress(Path(path).read_bytes())).hexdigest()


def _left(folder):
    """Every file under ``folder`` (finished or partial)."""
    return sorted(p.name for p in Path(folder).rglob("*") if p.is_file())


def test_the_sums_in_the_code_are_those_of_the_data_folder(mnist_dir):
    for name, sha in fetch.MNIST_SHA256.items():
        assert _content_sha(mnist_dir / name) == sha, name


def test_good_fetch_gives_the_same_data_one_line_per_file(serve, mnist_dir, tmp_path, monkeypatch, capsys):
    url, requests = serve(mnist_dir)
    monkeypatch.setenv("PPT_DASK_MIRRORS", url)
    target = tmp_path / "data"
    got = datasets.mnist(data_dir=target, n_train=500, n_test=200)
    assert _left(target) == sorted(NAMES)
    for name in NAMES:  # the same idx bytes as the data folder's copy
        assert _content_sha(target / "mnist" / name) == _content_sha(mnist_dir / name)
    expected = datasets.mnist(data_dir=mnist_dir.parent, n_train=500, n_test=200)
    np.testing.assert_array_equal(got.X, expected.X)
    np.testing.assert_array_equal(got.y_test, expected.y_test)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fetched")]
    assert len(lines) == 4 and all("SHA-256 ok" in line and url in line for line in lines)
    assert sorted(requests) == sorted("/" + n for n in NAMES)
    # present now: found again, nothing asked of the mirror
    datasets.mnist(data_dir=target, n_train=10, n_test=10)
    assert len(requests) == 4


def test_a_corrupt_file_is_refused_and_deleted(serve, mnist_dir, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    labels = bytearray(gzip.decompress((mnist_dir / SMALL).read_bytes()))
    labels[100] = (labels[100] + 1) % 10  # one label changed: a valid gzip of the wrong bytes
    (bad / SMALL).write_bytes(gzip.compress(bytes(labels)))
    bad_url, _ = serve(bad)
    target = tmp_path / "data"
    with pytest.raises(fetch.FetchError, match="SHA-256 .* refused and deleted"):
        fetch.fetch_file(SMALL, target, [bad_url])
    assert _left(target) == []
    # a damaged gzip stream (bytes cut from the middle) is refused too
    raw = (mnist_dir / SMALL).read_bytes()
    (bad / SMALL).write_bytes(raw[:2000] + raw[2100:])
    with pytest.raises(fetch.FetchError, match=SMALL):
        fetch.fetch_file(SMALL, target, [bad_url])
    assert _left(target) == []
    # with a good mirror after it, the good copy is the one kept
    good_url, _ = serve(mnist_dir)
    path = fetch.fetch_file(SMALL, target, [bad_url, good_url])
    assert _content_sha(path) == fetch.MNIST_SHA256[SMALL] and _left(target) == [SMALL]


def _dead_url():
    """A port on 127.0.0.1 that nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/"


def test_a_dead_first_mirror_falls_over_to_the_next(serve, mnist_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    missing_url, _ = serve(empty)  # answers 404
    dead_url = _dead_url()
    good_url, requests = serve(mnist_dir)
    target = tmp_path / "data"
    path = fetch.fetch_file(SMALL, target, [dead_url, missing_url, good_url])
    assert _content_sha(path) == fetch.MNIST_SHA256[SMALL] and requests == ["/" + SMALL]
    with pytest.raises(fetch.FetchError) as info:
        fetch.fetch_file(SMALL, tmp_path / "other", [dead_url, missing_url])
    message = str(info.value)
    assert "unreachable" in message and "HTTP 404" in message and "PPT_DASK_MIRRORS" in message
    assert _left(tmp_path / "other") == []


def test_offline_only_looks(serve, mnist_dir, tmp_path, monkeypatch):
    url, requests = serve(mnist_dir)
    monkeypatch.setenv("PPT_DASK_MIRRORS", url)
    with pytest.raises(FileNotFoundError, match="offline"):
        datasets.mnist(data_dir=tmp_path / "data", offline=True)
    monkeypatch.setenv("PPT_DASK_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match=SMALL):
        datasets.mnist(data_dir=tmp_path / "data")
    assert requests == [] and _left(tmp_path) == []


def test_mirrors_that_are_not_urls_are_named(monkeypatch, tmp_path):
    monkeypatch.setenv("PPT_DASK_MIRRORS", "http://127.0.0.1:9/ ftp.example.org/mnist")
    with pytest.raises(ValueError, match="PPT_DASK_MIRRORS.*ftp.example.org/mnist"):
        datasets.mnist(data_dir=tmp_path / "data")


def test_without_a_named_folder_mnist_goes_to_the_user_cache(serve, mnist_dir, tmp_path, monkeypatch):
    url, requests = serve(mnist_dir)
    monkeypatch.setenv("PPT_DASK_MIRRORS", url)
    monkeypatch.delenv("PPT_DASK_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")  # no ../shared/data here
    beside = [c for c in files.data_dir_candidates()[:-1] if not fetch.missing_files(c)]
    d = datasets.mnist(n_train=20, n_test=20)
    assert d.X.shape == (20, 784)
    if beside:  # the clone sits beside shared/data: found there, nothing fetched
        assert requests == [] and not (tmp_path / "cache").exists()
    else:
        assert _left(tmp_path / "cache" / "ppt_dask") == sorted(NAMES)


def test_progress_bar_on_a_terminal(serve, mnist_dir, tmp_path):
    """The download's bar is the one progress display's (tqdm, ppt_dask.progress): on a
    terminal a bar of bytes redrawn in place, then the line that says the file arrived."""
    from ppt_dask.progress import Download

    url, _ = serve(mnist_dir)
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as tty:
        progress = Download(stream=tty)
        assert progress.kind == "bar"
        fetch.fetch_file("train-labels-idx1-ubyte.gz", tmp_path, [url], progress=progress)
    shown = b""
    while True:
        try:
            piece = os.read(leader, 1 << 16)
        except OSError:
            break
        if not piece:
            break
        shown += piece
    os.close(leader)
    assert b"\r" in shown and b"fetched mnist/train-labels-idx1-ubyte.gz" in shown
    assert b"train-labels-idx1-ubyte.gz: " in shown and b"kB" in shown  # tqdm's bar: the file, its bytes


def test_an_interrupted_download_leaves_nothing(serve, mnist_dir, tmp_path):
    """Ctrl-C (SIGINT) during ``ppt-dask train mnist``'s download: one line, status 130,
    neither a partial nor a final file left."""
    url, _ = serve(mnist_dir, slow=True)
    target = tmp_path / "data"
    env = {**os.environ, "PPT_DASK_MIRRORS": url, "PPT_DASK_DATA": str(target)}
    env.pop("PPT_DASK_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-m", "ppt_dask.cli", "train", "mnist", "--workers", "1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any(".part-" in name for name in _left(tmp_path)):
        assert proc.poll() is None and time.monotonic() < deadline, "no download started"
        time.sleep(0.05)
    time.sleep(0.3)  # some bytes written
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "ppt-dask: interrupted" and "Traceback" not in err
    assert _left(target) == []


def test_command_line_fetches_verifies_and_trains(serve, mnist_dir, tmp_path):
    """``PPT_DASK_DATA=$(mktemp -d) PPT_DASK_MIRRORS=http://127.0.0.1:PORT/ ppt-dask train
    mnist --epochs 1`` with a local server (the issue's acceptance command)."""
    url, _ = serve(mnist_dir)
    target = tmp_path / "data"
    env = {**os.environ, "PPT_DASK_MIRRORS": url, "PPT_DASK_DATA": str(target)}
    out = tmp_path / "summary.json"
    run = subprocess.run([sys.executable, "-m", "ppt_dask.cli", "train", "mnist", "--epochs", "1",
                          "--workers", "2", "--quiet", "--json", str(out)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    fetched = [line for line in run.stderr.splitlines() if line.startswith("fetched mnist/")]
    assert len(fetched) == 4, run.stderr
    summary = json.loads(out.read_text())
    accuracy = summary["test_accuracy"]
    assert summary["dataset"] == "mnist" and run.stdout.startswith("mnist: ") and "test accuracy" in run.stdout
    assert accuracy > 0.85  # one epoch of the preset learns; random weights give about 0.1
    assert _left(target) == sorted(NAMES)


def test_fetched_files_are_readable_by_everyone(serve, mnist_dir, tmp_path):
    """The temporary file is private (mkstemp); the data file it becomes is not."""
    url, _ = serve(mnist_dir)
    path = fetch.fetch_file(SMALL, tmp_path, [url])
    assert path.stat().st_mode & 0o777 == 0o644
