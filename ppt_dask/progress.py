"""What a person watches while a run goes: one progress display, for training and downloads.

The display fits where it runs. tqdm draws it (``tqdm.auto``): in Jupyter a widget
(ipywidgets: a bar and its text, which a saved notebook keeps), on a terminal a bar redrawn
in place; where standard error is neither (a log file, a pipe, CI) it writes a plain line
every few seconds instead, since a bar redrawn with carriage returns turns a log into one
unreadable line. Without ipywidgets a notebook gets tqdm's text bar.

:class:`Training` is a progress callback for the round loop (``ppt.train(...,
progress=True)``, ``PPTClassifier(verbose=True)``, ``ppt-dask train``): epochs of the total,
loss, error, patterns per second, time left, and the link to the run's ``/ppt`` page.
:class:`Download` shows a file coming from a mirror (:mod:`ppt_dask.data.fetch`).

Why tqdm: the one maintained library that draws both a notebook widget and a terminal bar,
pure Python with no dependencies of its own (the widget needs ipywidgets, an optional
extra). Dask's own progress bars follow futures to their end, not a loop's epochs.
"""

from __future__ import annotations

import math
import sys
import time
import warnings

WIDTH = 24  # characters of a terminal bar
REDRAW_SECONDS = 0.2  # between two redraws of a bar or a widget
LINE_SECONDS = 2.0  # between two plain lines


def duration(seconds: float) -> str:
    """``0.042 s``, ``1.84 s``, ``12.3 s``, ``3 min 05 s``, ``2 h 04 min``."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    if seconds < 1:
        return f"{seconds:.3f} s"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def stop_reason(stopped_because: str, learned: bool, target_error) -> str:
    """Why a run stopped, in words."""
    if stopped_because == "target_error":
        return "target reached"
    if stopped_because == "stopped":
        return "stopping rule"
    if stopped_because.startswith("diverged"):
        return stopped_because.replace("diverged", "diverged (loss not finite)", 1)
    if stopped_because == "max_epochs":
        return "max epochs" + ("" if target_error is None or learned else
                               f" (target of {100 * target_error:g} % error not reached)")
    return stopped_because.replace("_", " ")


def _kind(stream) -> str:
    """"widget" in a Jupyter kernel with ipywidgets, "bar" on a terminal (or a kernel
    without them: its output area takes carriage returns), "lines" elsewhere."""
    tqdm = _tqdm_auto()
    if any(c.__name__ == "tqdm_notebook" for c in tqdm.__mro__):
        return "widget"
    in_kernel = "ipykernel" in sys.modules and type(stream).__module__.startswith("ipykernel")
    return "bar" if in_kernel or getattr(stream, "isatty", lambda: False)() else "lines"


def _tqdm_auto():
    """``tqdm.auto.tqdm``, imported when first needed; tqdm's warning that ipywidgets is
    missing becomes one that names the extra that brings it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from tqdm.auto import tqdm
    if any("IProgress not found" in str(w.message) for w in caught):
        warnings.warn("progress: no ipywidgets, so a text bar instead of the notebook widget "
                      "(pip install 'ppt_dask[notebook]')", stacklevel=3)
    return tqdm


def _bar_class(kind: str, shown: dict | None = None):
    """tqdm's class for ``kind``: the display's own text in ``shown`` (``head``, ``tail``:
    set before the first draw) and no monitor thread."""
    if kind == "widget":
        base = _tqdm_auto()
    else:
        from tqdm.std import tqdm as base

    class Bar(base):
        monitor_interval = 0  # no background thread in the head's process

        @property
        def format_dict(self):
            return {**super().format_dict, **self.shown}

    Bar.shown = dict(shown or {})
    return Bar


class Training:
    """The progress of a training run: a callable the round loop gives each round's record.

    Parameters
    ----------
    total_epochs : float
        The most epochs the run may take (its ``Stop.max_epochs``).
    link : str or callable, optional
        The run's ``/ppt`` page (:func:`ppt_dask.cluster.page_url`), shown once above the bar
        (a link in a notebook); a callable is asked for it when the display starts.
    stream : file, optional
        Where a bar or the lines go (default: standard error).
    kind : {"widget", "bar", "lines"}, optional
        Default: what fits where it runs (see the module's text).

    Each record holds ``epoch``, ``loss``, ``error_rate``, ``patterns`` and ``wall_seconds``
    (the trainer's round records); ``elapsed_seconds``, when there, times the rate from the
    run's own start. Nothing is drawn before the first record, so a run refused by its
    checks shows no bar. :meth:`close` draws the last state and says why the run stopped.
    """

    def __init__(self, total_epochs: float, *, link=None, stream=None, kind: str | None = None):
        if kind not in (None, "widget", "bar", "lines"):
            raise ValueError(f"kind must be 'widget', 'bar' or 'lines', got {kind!r}")
        self.total, self.link, self.kind = float(total_epochs), link, kind
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()
        self.epoch, self.patterns, self.elapsed, self.last_line = 0.0, 0, 0.0, -math.inf
        self.record: dict = {}
        self.bar, self.started, self.closed, self.unshown = None, False, False, False
        self.handle = None  # a notebook's display of the widget

    def _start(self) -> None:
        """Show the link and make the bar (a widget, a terminal's bar; none for plain lines)."""
        self.started = True
        self.kind = self.kind or _kind(self.stream)
        link = self.link() if callable(self.link) else self.link
        if link:
            self._show_link(link)
        if self.kind != "lines":
            # the share is the display's own (of the most epochs): a notebook's bar ends at
            # the epochs run (close), and tqdm's percentage would then say 100
            bar = f"[{{bar:{WIDTH}}}]" if self.kind == "bar" else "{bar}"
            fmt = f"{{head}} {bar} {{percent}}  {{tail}}"
            self.bar = _bar_class(self.kind, self._fields())(
                total=self.total, initial=min(self.epoch, self.total), file=self.stream, bar_format=fmt,
                ascii=".#" if self.kind == "bar" else None, mininterval=REDRAW_SECONDS, leave=True,
                **({"display": False} if self.kind == "widget" else {}))
            if self.kind == "widget":  # shown with a handle: its text copy can follow the run (close)
                from IPython.display import display

                self.handle = display(self.bar.container, display_id=True)
                self.bar.displayed = True

    def _show_link(self, url: str) -> None:
        if self.kind == "widget":
            from IPython.display import display

            display({"text/html": f'time breakdown, live: <a href="{url}" target="_blank">{url}</a>',
                     "text/plain": f"time breakdown, live: {url}"}, raw=True)
        else:
            print(f"time breakdown, live: {url}", file=self.stream, flush=True)

    def _fields(self, done: str = "") -> dict:
        """The text around the bar: ``head`` (epochs of the total), ``tail`` (rate, time
        left, loss, error, round time) and, for plain lines, ``share``."""
        rate = self.epoch / self.elapsed if self.elapsed > 0 else 0.0
        left = (self.total - self.epoch) / rate if rate > 0 else math.inf
        speed = self.patterns / self.elapsed if self.elapsed > 0 else 0.0
        from tqdm.std import tqdm as std

        tail = done or (f"{std.format_sizeof(speed)} patterns/s, {duration(max(0.0, left))} left" if self.record
                        else "starting")
        r = self.record
        if r:
            tail += (f"  loss {r['loss']:.4g}  error {100 * r['error_rate']:.2f} %  "
                     f"{1e3 * r['wall_seconds']:.4g} ms/round")
        share = min(1.0, self.epoch / self.total) if self.total > 0 else 1.0
        return {"head": f"epoch {self.epoch:.2f}/{self.total:g}", "tail": tail, "share": share,
                "percent": f"{100 * share:3.0f}%"}

    def __call__(self, record: dict) -> None:
        self.record = record
        self.epoch = float(record["epoch"])
        self.patterns += int(record.get("patterns", 0))
        self.elapsed = float(record.get("elapsed_seconds", time.perf_counter() - self.t0))
        self.unshown = True
        if not self.started:
            self._start()  # drawn at this record's state
            if self.bar is None:
                self._line()
        elif self.bar is not None:
            self.bar.shown = self._fields()
            self.bar.update(min(self.epoch, self.total) - self.bar.n)
        elif time.perf_counter() - self.last_line >= LINE_SECONDS:
            self._line()

    def _line(self, done: str = "") -> None:
        self.last_line, self.unshown = time.perf_counter(), False
        f = self._fields(done)
        print(f"{f['head']} ({100 * f['share']:.0f} %)  {f['tail']}", file=self.stream, flush=True)

    def write(self, line: str, file=None) -> None:
        """Print ``line`` (to ``file``, default standard output) without breaking the bar."""
        if self.bar is not None:
            self.bar.write(line, file=file or sys.stdout)
        else:
            print(line, file=file or sys.stdout, flush=True)

    def close(self, result=None) -> None:
        """Draw the last state; with the run's ``result``, say why it stopped. Without one
        (an error, Ctrl-C) a notebook's bar turns red where the run ended. Once only."""
        if self.closed:
            return
        self.closed = True
        if not self.started:
            if result is None:
                return  # refused or failed before its first round: nothing was shown
            self._start()
        if result is not None:
            done = (f"{stop_reason(result.stopped_because, result.learned, result.settings.get('target_error'))}"
                    f" after {duration(result.wall_seconds)}")
            if self.bar is not None:
                self.bar.shown = self._fields(done)
                if self.kind == "widget":
                    self.bar.total = self.bar.n  # a run that stopped early ended well: no red bar
            else:
                self._line(done)
        elif self.bar is None and self.unshown:  # the last records since the last line
            self._line()
        if self.bar is not None:
            self.bar.close()
            if self.handle is not None:  # the text a viewer without widgets shows: the last state
                self.handle.update(self.bar.container)
            self.bar = None


class Download:
    """The progress of files coming from a mirror: a bar per file on a terminal or in a
    notebook, and one line per file that arrived (logs, pipes, CI see only those)."""

    def __init__(self, stream=None, kind: str | None = None):
        self.stream = stream or sys.stderr
        self.kind = kind or _kind(self.stream)
        self.bar = None

    def start(self, name: str, url: str, total: int | None) -> None:
        self.name, self.url, self.t0 = name, url, time.monotonic()
        if self.kind != "lines":
            self.bar = _bar_class(self.kind)(total=total, desc=name, unit="B", unit_scale=True, unit_divisor=1000,
                                             file=self.stream, mininterval=REDRAW_SECONDS, leave=False,
                                             ascii=".#" if self.kind == "bar" else None)

    def update(self, done: int) -> None:
        if self.bar is not None:
            self.bar.update(done - self.bar.n)

    def finish(self, done: int) -> None:
        self.abandon()
        seconds = time.monotonic() - self.t0
        size = f"{done / 1e6:.1f} MB" if done >= 1e5 else f"{done / 1e3:.1f} kB"
        print(f"fetched mnist/{self.name} ({size} in {seconds:.1f} s, SHA-256 ok) from {self.url}",
              file=self.stream, flush=True)

    def abandon(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
