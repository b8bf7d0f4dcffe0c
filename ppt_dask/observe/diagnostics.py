"""Collect where the time goes: a scheduler plugin and the head's side.

Collector -> pure transform -> thin view (distributed's own ``diagnostics/`` are the
model). This module collects; :mod:`ppt_dask.observe.breakdown` turns the records into per-round
rows, a gprof-style phase table and a Chrome trace; :mod:`ppt_dask.observe.dashboard` draws them.

* :class:`Collector`, a ``SchedulerPlugin``, keeps one :class:`~ppt_dask.observe.breakdown.TaskRecord`
  per finished ``ppt-*`` task, built from what distributed measures anyway: when the
  graph reached the scheduler (``update_graph``), when the task went to its worker and
  when its result came back (``transition``, on the scheduler's clock), and the durations
  in the workers' own ``startstops`` (compute, transfer, deserialize, spill). Nothing is
  timed inside the tasks. Records are kept per run (the run id is in every key,
  ``ppt-grad-<run>-g<gen>-r<round>``) in bounded deques; the head's per-round records in a
  :class:`~ppt_dask.observe.roundlog.RoundLog` of the last ``SCHEDULER_WINDOW`` rounds (the
  older ones folded into bins), what the ``/ppt`` page draws.
* :class:`Recorder` is the head's side: it announces a run (``log_event``), keeps its per-round
  records (loss, error, head seconds; on streamed rounds, each loop's own timing of the round,
  which the scheduler cannot see) in a :class:`~ppt_dask.observe.roundlog.RoundLog` (the last
  ``WINDOW`` rounds in full, the older ones in bins: memory bounded however long the run),
  sends them to the collector in batches every quarter of a second through the collector's
  own handler, without the head waiting for the reply (a ``log_event`` each would stay in the
  scheduler's event log, up to 100,000 of them, and grew the scheduler with the rounds), and
  fetches the task records at the end. Its cost per round is measured (``head_cost_seconds``).

A finished run's records (:class:`~ppt_dask.observe.records.RunRecords`, what ``finish`` returns) are
:mod:`ppt_dask.observe.records`. The test hook that makes gradient tasks take a known extra time is
:func:`ppt_dask.testing.slow_gradients`.
"""

from __future__ import annotations

import pickle
import time
import warnings
from collections import OrderedDict, deque
from collections.abc import Callable

from distributed.diagnostics.plugin import SchedulerPlugin

from ppt_dask.core.keys import parse_key, phases_of
from ppt_dask.observe.breakdown import TaskRecord
from ppt_dask.observe.records import HEAD_FIELDS as HEAD_FIELDS
from ppt_dask.observe.records import RunRecords as RunRecords
from ppt_dask.observe.records import plain_settings
from ppt_dask.observe.records import records_of as records_of
from ppt_dask.observe.records import write_trace as write_trace
from ppt_dask.observe.roundlog import WINDOW, RoundLog

TOPIC = "ppt-diagnostics"  # log_event topic of the head's messages
NAME = "ppt-diagnostics"  # the plugin's name on the scheduler
HANDLER = "ppt_diagnostics"  # its rpc handler on the scheduler (fetches a run's records)
ROUNDS_HANDLER = "ppt_diagnostics_rounds"  # the handler that takes the head's batches of rounds
SCHEDULER_WINDOW = 300  # rounds the collector keeps in full (the /ppt page draws 300: dashboard.PAGE_ROUNDS)
LOOPS = "loops"  # a streamed round's record: each worker loop's own timing of the round

def _text(key) -> str:
    return key if isinstance(key, str) else str(key)


class RunLog:
    """What the collector holds for one run (bounded)."""

    def __init__(self, run: str, max_tasks: int, max_rounds: int):
        self.run = run
        self.settings: dict = {}
        self.tasks: deque = deque(maxlen=max_tasks)
        self.heads = RoundLog(window=max_rounds, max_bins=max(2, max_rounds // 5))
        self.dropped = 0  # task records pushed out of the deque
        self.version = 0  # bumped on every change (the page redraws only then)

    def add_task(self, record: TaskRecord) -> None:
        if len(self.tasks) == self.tasks.maxlen:
            self.dropped += 1
        self.tasks.append(record)
        self.version += 1


class Collector(SchedulerPlugin):
    """Scheduler plugin: bounded per-task records of ``ppt-*`` keys, grouped by run.

    Parameters
    ----------
    max_tasks : int
        Task records kept per run (the oldest go first): about 5 per worker per round,
        some 200 bytes each.
    max_rounds : int
        Head records kept in full per run (at least; older rounds fold into bins).
    max_runs : int
        Runs kept (the oldest go first).
    """

    name = NAME
    idempotent = True  # registering again (each run does) keeps the running one

    def __init__(self, max_tasks: int = 40_000, max_rounds: int = SCHEDULER_WINDOW, max_runs: int = 3):
        self.max_tasks, self.max_rounds, self.max_runs = max_tasks, max_rounds, max_runs
        self.runs: OrderedDict[str, RunLog] = OrderedDict()
        self.scheduler = None
        self._pending: dict = {}  # key -> [run, prefix, gen, round, submitted, sent], in flight
        self._client_run: dict = {}  # client id -> its latest run (for keys without a run id)

    def setup(self, scheduler) -> None:
        self.scheduler = scheduler
        scheduler.handlers[HANDLER] = self.query
        scheduler.handlers[ROUNDS_HANDLER] = self.rounds

    async def start(self, scheduler) -> None:
        self.setup(scheduler)

    def run_log(self, run: str) -> RunLog:
        log = self.runs.get(run)
        if log is None:
            log = self.runs[run] = RunLog(run, self.max_tasks, self.max_rounds)
            while len(self.runs) > self.max_runs:
                self.runs.popitem(last=False)
        return log

    def latest(self) -> RunLog | None:
        return next(reversed(self.runs.values()), None)

    # -- hooks called by the scheduler -----------------------------------------------

    def update_graph(self, scheduler, *, client=None, tasks=(), **kwargs) -> None:
        now = time.time()
        for key in tasks:
            parsed = parse_key(key)
            if parsed is None:
                continue
            prefix, run, gen, rnd = parsed
            if run is not None:
                self._client_run[client] = run
            else:
                run = self._client_run.get(client)
                if run is None:
                    continue
            if key not in self._pending:  # later graphs that use it touch it again
                self.run_log(run)
                self._pending[key] = [run, prefix, gen, rnd, now, now]

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if finish == "processing":
            entry = self._pending.get(key)
            if entry is not None:
                entry[5] = time.time()
        elif finish == "memory":
            entry = self._pending.pop(key, None)
            if entry is not None and start == "processing":
                self._record(key, entry, kwargs)
        elif finish in ("forgotten", "erred"):
            self._pending.pop(key, None)

    def _record(self, key, entry, kwargs) -> None:
        done = time.time()
        run, prefix, gen, rnd, submitted, sent = entry
        log = self.runs.get(run)
        if log is None:
            return
        startstops = kwargs.get("startstops") or ()
        compute = sum(s["stop"] - s["start"] for s in startstops if s["action"] == "compute")
        io = tuple((s["action"], s["stop"] - s["start"], s.get("source"))
                   for s in startstops if s["action"] != "compute")
        ts = self.scheduler.tasks.get(key) if self.scheduler is not None else None
        deps = () if ts is None else tuple(
            _text(d.key) for d in ts.dependencies if parse_key(d.key) is not None)
        phases = tuple(phases_of(kwargs.get("metadata")).items())
        log.add_task(TaskRecord(_text(key), prefix, run, gen, rnd, kwargs.get("worker"), submitted,
                                sent, done, compute, int(kwargs.get("nbytes") or 0), deps, io, phases))

    def log_event(self, topic, msg) -> None:
        if topic != TOPIC or not isinstance(msg, dict) or "run" not in msg:
            return
        log = self.run_log(msg["run"])
        if msg.get("op") == "start":
            log.settings = dict(msg.get("settings") or {})
            if msg.get("client"):
                self._client_run[msg["client"]] = msg["run"]
        log.version += 1

    def rounds(self, run: str, packed: bytes) -> None:
        """The handler of the head's batches of round records (:meth:`Recorder.flush`)."""
        log = self.run_log(run)
        log.heads.extend(pickle.loads(packed))
        log.version += 1

    def remove_client(self, scheduler, client) -> None:
        self._client_run.pop(client, None)

    # -- the rpc handler ---------------------------------------------------------------

    def query(self, run: str | None = None, heads: bool = True) -> dict:
        """A run's records as plain lists (msgpack-able); the latest run by default. With
        ``heads=False`` without the head's round records (the head that sent them keeps its
        own: turning the window into dicts and sending them took tens of milliseconds at
        the end of every run)."""
        log = self.runs.get(run) if run is not None else self.latest()
        if log is None:
            return {"run": run, "runs": list(self.runs), "settings": {}, "tasks": [], "heads": [],
                    "dropped": 0}
        return {"run": log.run, "runs": list(self.runs), "settings": log.settings,
                "tasks": [list(t) for t in log.tasks], "heads": log.heads.records() if heads else [],
                "dropped": log.dropped}


def ensure_collector(scheduler) -> Collector:
    """The scheduler's :class:`Collector`, started and added if it has none (in-process)."""
    plugin = scheduler.plugins.get(NAME)
    if plugin is None:
        plugin = Collector()
        plugin.setup(scheduler)
        scheduler.add_plugin(plugin, name=NAME, idempotent=True)
    return plugin


def attach(client) -> bool:
    """Make sure the scheduler runs a :class:`Collector`; False (and a warning) if it cannot."""
    try:
        client.register_plugin(Collector())
        return True
    except Exception as exc:  # e.g. a scheduler that cannot import ppt_dask
        warnings.warn(f"per-round time breakdown is off: the scheduler did not take the "
                      f"ppt_dask collector ({type(exc).__name__}: {exc})", RuntimeWarning, stacklevel=3)
        return False


async def _log_event(client, msg) -> None:
    try:
        await client.scheduler.log_event(topic=TOPIC, msg=msg)
    except Exception:  # diagnostics never break a run; the head keeps its own copy
        pass


async def _call_collector(client, handler: str, kwargs: dict) -> None:
    try:
        await getattr(client.scheduler, handler)(**kwargs)
    except Exception:  # diagnostics never break a run; the head keeps its own copy
        pass


class Recorder:
    """The head's side of the diagnostics for one run.

    Parameters
    ----------
    client : distributed.Client
    run : str
        The run id in the run's keys.
    settings : dict, optional
        Shown on the page and in the report.
    generation : int
        The generation of the first try (``gen`` of the keys is ``generation + try``).
    flush_seconds : float
        At most this long between two batches sent to the scheduler.
    report : callable, optional
        ``report(result, path)`` writes the run's HTML report (``Result.report``): the page
        module, which imports this one, gives it through :mod:`ppt_dask.api`.
    """

    def __init__(self, client, run: str, settings: dict | None = None, generation: int = 0,
                 flush_seconds: float = 0.25, max_rounds: int = WINDOW, report: Callable | None = None):
        self.client, self.run, self.generation = client, run, generation
        self.report = report
        self.settings = plain_settings(settings)
        self.flush_seconds = flush_seconds
        self.heads = RoundLog(window=max_rounds)
        self.seconds, self.rounds = 0.0, 0
        self._batch: list = []
        self._last = time.perf_counter()
        self.enabled = attach(client)
        self._send({"op": "start", "run": run, "client": client.id, "settings": self.settings})

    def _send(self, msg: dict) -> None:
        if self.enabled:
            try:
                self.client.loop.add_callback(_log_event, self.client, msg)
            except Exception:
                self.enabled = False

    def _call(self, handler: str, **kwargs) -> None:
        """Call the collector's ``handler`` on the client's event loop; the head goes on."""
        if self.enabled:
            try:
                self.client.loop.add_callback(_call_collector, self.client, handler, kwargs)
            except Exception:
                self.enabled = False

    def round_done(self, record: dict) -> None:
        """Called with each round's history record, as soon as the head has it."""
        t0 = time.perf_counter()
        h = {k: record.get(k) for k in HEAD_FIELDS}
        h["gen"] = record.get("gen", self.generation + int(record.get("try", 0)))
        if record.get(LOOPS) is not None:  # streamed rounds: the loops timed them
            h[LOOPS] = record[LOOPS]
        self.heads.add(h)
        self._batch.append(h)
        if t0 - self._last >= self.flush_seconds:
            self.flush()
        self.rounds += 1
        self.seconds += time.perf_counter() - t0

    def rounds_done(self, block) -> None:
        """A block of streamed rounds (:class:`ppt_dask.observe.roundlog.Block`) as the head read
        them: the same as :meth:`round_done` of each, with a row a loop and round, not a dict."""
        t0 = time.perf_counter()
        self.heads.add_block(block)
        self._batch.append(block)
        if t0 - self._last >= self.flush_seconds:
            self.flush()
        self.rounds += len(block.rounds)
        self.seconds += time.perf_counter() - t0

    def flush(self) -> None:
        if self._batch:
            # one opaque frame: sent as a list of dicts, the comm walked every value twice on the
            # head's event loop (its size, then msgpack): about 0.15 ms a round at p = 8 here
            self._call(ROUNDS_HANDLER, run=self.run, packed=pickle.dumps(self._batch, protocol=5))
            self._batch = []
        self._last = time.perf_counter()

    def finish(self, timeout: float = 30.0) -> RunRecords:
        """Send what is left and fetch the run's task records from the collector."""
        self.flush()
        reply = {"tasks": [], "dropped": 0}
        if self.enabled:
            try:
                reply = self.client.sync(getattr(self.client.scheduler, HANDLER),
                                         run=self.run, heads=False, callback_timeout=timeout)
            except Exception as exc:
                warnings.warn(f"could not fetch the run's task records ({type(exc).__name__}: {exc})",
                              RuntimeWarning, stacklevel=2)
        return RunRecords(self.run, self.settings, [TaskRecord.from_list(t) for t in reply["tasks"]],
                          self.heads.records(), reply["dropped"],
                          self.seconds / self.rounds if self.rounds else 0.0, self.report,
                          self.heads.bin_rows(), self.heads.bin_heads())
