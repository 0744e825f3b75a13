"""A speed reference: one fixed small model, measured again and again through a build
and through a model set's measurement, so that a device whose speed drifts says so.

A predictor describes a device at one speed, but a shared host does not hold one speed.
On two of the hosts this project ran on, the same whole models measured some minutes
apart disagreed by more than the accuracy targets allow: the 2-vCPU Xeon's in-model
calibration, measured twice eleven minutes apart, a median 1.06x (10th-90th percentile
1.01-1.12x); the Zen 5's, six hours apart, 1.14x (1.09-1.21x). Kernel rows, calibrations
and a model set measured at different speeds describe different machines, and no
predictor is better than that disagreement. Before this module nothing said so: the
figures just came out low.

So the builder measures :func:`reference_graph` at the start of a build, every
:data:`PROBE_EVERY_S` seconds while it profiles (:class:`ProbingProfiler`, one extra
measurement of about half a millisecond's model per interval), and before and after the
calibrations; ``experiments/model_accuracy.py measure`` does the same at the start of
every family. Each probe is one line of ``speed_reference.jsonl`` beside the data it
accompanies (:data:`REFERENCE_FILE`). :func:`summarize` gives the drift within one
record (how much slower than its fastest probe the device ran for two probes in a
row), :func:`drift_warning` a warning past
:data:`DRIFT_WARN`, and :func:`compare_records` how fast the device ran while one record
was made against another (a model set's probes against its predictor's build).

The reference is measured, not corrected for: a drift this file reports is a reason to
measure again on a quiet machine, not a factor to divide by (what slows a shared host
down slows a cache-bound depthwise convolution and a compute-bound one by different
amounts). One use scales by it, and only on request: a backend ranking
(``nnmeter select-backend --probe-speed``, :func:`nnmeter.selection.probe_speeds`)
compares predictors built at different times, so it can put each on the speed its
backend runs at now.

Examples
--------
>>> pts = [{"latency_ms": 0.50}, {"latency_ms": 0.60}, {"latency_ms": 0.61}]
>>> s = summarize(pts)
>>> s["probes"], round(s["drift"], 2), s["median_ms"]
(3, 0.2, 0.6)
>>> drift_warning(s, "this build").split(":")[0]
"the device's speed moved by 20.0 % during this build (3 probes of the speed reference, 0.5-0.61 ms)"
>>> round(compare_records(pts, [{"latency_ms": 0.75}]), 2)
1.25
>>> round(summarize([{"latency_ms": x} for x in (0.50, 0.60, 0.50)])["drift"], 2)  # one slow probe
0.0
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["REFERENCE_FILE", "PROBE_EVERY_S", "DRIFT_WARN", "reference_graph",
           "SpeedReference", "ProbingProfiler", "read_reference", "summarize",
           "drift_warning", "compare_records", "set_against_builds", "SPEED_WARN",
           "speed_change_warning", "speed_against_build", "describe", "DISTURBED",
           "disturbed_windows"]

logger = logging.getLogger(__name__)

#: the probes' record, beside the rows they accompany
REFERENCE_FILE = "speed_reference.jsonl"
#: seconds between two probes while a build profiles
PROBE_EVERY_S = 120.0
#: a record that ran this much slower than its fastest probe (:func:`summarize`) gets a
#: warning
DRIFT_WARN = 0.05
#: two records whose medians differ by more than this factor (either way) get a warning
#: (:func:`speed_change_warning`)
SPEED_WARN = 1.10


def reference_graph() -> Any:
    """The reference model: a 3x3 convolution, a 3x3 depthwise convolution and a 1x1
    convolution, each with a ReLU, over a 32x56x56 input (0.47-0.71 ms on one Zen 4 core
    through ORT, OpenVINO, MNN and LiteRT). Small enough to probe often, and made of the
    dense, depthwise and pointwise kernels that most zoo time goes to. Never change it:
    records made with another reference do not compare."""
    from nnmeter.ir import GraphBuilder

    b = GraphBuilder("speed-reference", (1, 32, 56, 56))
    x = b.relu(b.conv(b.x, 32, 3))
    x = b.relu(b.dwconv(x, 3))
    x = b.relu(b.conv(x, 64, 1))
    return b.build([x])


def read_reference(directory: str | os.PathLike[str], *, tag: str | None = None
                   ) -> list[dict[str, Any]]:
    """The probes recorded under ``directory`` (torn or foreign lines skipped), oldest
    first; only those of ``tag`` (a model set's name, :class:`SpeedReference`) when
    given; [] when there is no record."""
    from nnmeter.predictors.dataset import read_jsonl

    return [row for row in read_jsonl(Path(directory) / REFERENCE_FILE)
            if isinstance(row.get("latency_ms"), (int, float)) and row["latency_ms"] > 0
            and (tag is None or row.get("set") == tag)]


def summarize(points: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """``probes``, ``median_ms``, ``min_ms``, ``max_ms`` and ``drift`` of a record's
    probes, with the first and last timestamps (and ``memory_ratio_median`` where the
    probes recorded the memory probe); None for no probe.

    ``drift`` is how much slower than the fastest probe the device ran for two probes in
    a row (less 1; with two probes, the slower over the faster). Interference only adds
    time, and one probe caught by it is noise: a 40-minute build on the Zen 4 had 13 probes
    within 0.672-0.678 ms and one at 0.708 ms with a spread of its own five times the
    others'. A device that changed speed shows it in consecutive probes."""
    ms = [float(p["latency_ms"]) for p in points if p.get("latency_ms")]
    if not ms:
        return None
    held = [min(a, b) for a, b in zip(ms, ms[1:])] if len(ms) > 2 else ms
    out = {"probes": len(ms), "median_ms": statistics.median(ms), "min_ms": min(ms),
           "max_ms": max(ms), "drift": max(held) / min(ms) - 1.0,
           "first": points[0].get("timestamp"), "last": points[-1].get("timestamp")}
    memory = [float(p["memory_ratio"]) for p in points if p.get("memory_ratio")]
    if memory:  # probes made since the memory probe exists
        out["memory_ratio_median"] = statistics.median(memory)
    return out


def describe(summary: dict[str, Any]) -> str:
    """One line for a :func:`summarize` result, as the build summaries print it.

    >>> describe({"probes": 4, "min_ms": 0.52, "max_ms": 0.65, "drift": 0.141})
    'speed reference: 4 probes, 0.52-0.65 ms (drift 14.1 %)'
    >>> describe({"probes": 2, "min_ms": 0.5, "max_ms": 0.5, "drift": 0.0,
    ...           "memory_ratio_median": 1.31}).split("; ")[1]
    "the host's memory at a median 1.31x its fastest"
    """
    line = (f"speed reference: {summary['probes']} probes, {summary['min_ms']:.3g}-"
            f"{summary['max_ms']:.3g} ms (drift {100 * summary['drift']:.1f} %)")
    if summary.get("memory_ratio_median") is not None:
        line += (f"; the host's memory at a median {summary['memory_ratio_median']:.2f}x "
                 f"its fastest")
    return line


def drift_warning(summary: dict[str, Any] | None, what: str, *,
                  limit: float = DRIFT_WARN) -> str | None:
    """A one-line warning when ``summary``'s drift passes ``limit``, else None."""
    if not summary or summary["probes"] < 2 or summary["drift"] <= limit:
        return None
    return (f"the device's speed moved by {100 * summary['drift']:.1f} % during {what} "
            f"({summary['probes']} probes of the speed reference, {summary['min_ms']:.3g}-"
            f"{summary['max_ms']:.3g} ms): measurements made at different speeds cannot "
            f"give a predictor or a figure better than that; measure on a quiet machine "
            f"(the record: {REFERENCE_FILE})")


#: a probe this much slower than the fastest of its build (:func:`disturbed_windows`)
#: marks the rows measured around it as disturbed
DISTURBED = 0.05


def disturbed_windows(points: Sequence[dict[str, Any]], *, limit: float = DISTURBED,
                      phases: Sequence[str] = ("start", "profile")
                      ) -> list[tuple[str, str, float]]:
    """The spans of a kernel dataset's record in which the device ran slow: for each
    probe of ``phases`` more than ``limit`` slower than the fastest probe of its build
    (a build's probes start at a ``start`` probe), the span from the probe before it to
    the probe after it (the build's first or last probe where there is none), as
    ``(first, last, ratio)``: timestamps as the rows carry them and the probe's time
    over the build's fastest. Overlapping spans merge (keeping the larger ratio).

    Interference only adds time, and a probe every two minutes cannot say when in
    between it began or ended, so every row measured between the neighbouring probes is
    suspect; :func:`nnmeter.builder.remeasure_disturbed` measures them again. A build
    whose every probe ran slow ran on a slower host, which no probe can tell from
    interference; :func:`summarize` and :func:`compare_records` report that.

    >>> pts = [{"timestamp": t, "phase": ph, "latency_ms": ms} for t, ph, ms in [
    ...     ("T10", "start", 0.48), ("T12", "profile", 0.49), ("T14", "profile", 0.67),
    ...     ("T16", "profile", 0.48), ("T18", "calibrate", 0.60)]]
    >>> disturbed_windows(pts)
    [('T12', 'T16', 1.3958333333333335)]
    """
    builds: list[list[dict[str, Any]]] = []
    for p in points:
        if p.get("phase") == "start" or not builds:
            builds.append([])
        builds[-1].append(p)
    spans: list[tuple[str, str, float]] = []
    for build in builds:
        timed = [p for p in build if isinstance(p.get("latency_ms"), (int, float))
                 and p["latency_ms"] > 0 and p.get("timestamp")]
        if not timed:
            continue
        fastest = min(float(p["latency_ms"]) for p in timed)
        for i, p in enumerate(timed):
            ratio = float(p["latency_ms"]) / fastest
            if p.get("phase") not in phases or ratio <= 1.0 + limit:
                continue
            first = timed[max(0, i - 1)]["timestamp"]
            last = timed[min(len(timed) - 1, i + 1)]["timestamp"]
            if spans and first <= spans[-1][1]:
                a, b, r = spans[-1]
                spans[-1] = (a, max(b, last), max(r, ratio))
            else:
                spans.append((first, last, ratio))
    return spans


def set_against_builds(set_path: str | os.PathLike[str],
                       builds: Mapping[str, str | os.PathLike[str]]) -> dict[str, Any]:
    """The probes of the model set written to ``set_path`` (``<folder>/<set>.jsonl``,
    :class:`SpeedReference` with its stem as tag) summarized as ``"set"``, and for each
    ``label -> kernel dataset folder`` of ``builds`` the ratio of the set's median to
    that build's (None where either has no probe)."""
    path = Path(set_path)
    mine = read_reference(path.parent, tag=path.stem)
    out: dict[str, Any] = {"set": summarize(mine)}
    for label, directory in builds.items():
        out[label] = compare_records(read_reference(directory), mine)
    return out


def compare_records(before: Sequence[dict[str, Any]],
                    after: Sequence[dict[str, Any]]) -> float | None:
    """How much longer the reference took in ``after``'s probes than in ``before``'s
    (ratio of the medians); None when either has no probe."""
    a, b = summarize(before), summarize(after)
    if a is None or b is None:
        return None
    return b["median_ms"] / a["median_ms"]


def speed_change_warning(ratio: float | None, now: str, then: str, *,
                         limit: float = SPEED_WARN) -> str | None:
    """A one-line warning when the reference took ``ratio`` (``now`` over ``then``, as
    :func:`compare_records` gives it) outside ``[1/limit, limit]``, else None.

    >>> speed_change_warning(1.25, "this build", "this dataset's earlier builds").split(":")[0]
    "the speed reference took 1.25x its time in this dataset's earlier builds during this build"
    >>> speed_change_warning(1.04, "now", "then") is None
    True
    """
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return None
    if 1.0 / limit <= ratio <= limit:
        return None
    how = "slower" if ratio > 1 else "faster"
    return (f"the speed reference took {ratio:.2f}x its time in {then} during {now}: "
            f"the device ran {abs(ratio - 1) * 100:.0f} % {how}, and measurements made "
            f"at two speeds describe two machines (the record: {REFERENCE_FILE})")


def speed_against_build(backend_id: str, dataset_dir: str | os.PathLike[str] | None, *,
                        measure_ms: Callable[[Any, str], float | None] | None = None
                        ) -> dict[str, Any] | None:
    """The reference measured now on ``backend_id`` against the probes of the build
    that made the kernel dataset ``dataset_dir``: ``now_ms``, ``build_ms`` (the build's
    median), ``build_probes``, ``ratio`` (now over build) and ``warning``
    (:func:`speed_change_warning`, None within :data:`SPEED_WARN`). None when the
    dataset has no probe or the measurement fails. ``measure_ms(graph, backend_id)``
    measures (default: a worker of its own, as ``nnmeter measure`` does).

    This is what tells a user comparing a prediction with a measurement on a busy
    machine how much of the difference is the machine's speed now."""
    if dataset_dir is None:
        return None
    build = read_reference(dataset_dir)
    base = summarize(build)
    if base is None:
        return None
    if measure_ms is None:
        def measure_ms(graph: Any, backend: str) -> float | None:
            from nnmeter.backends import measure

            m = measure(graph, backend, on_error="record")
            return float(m.latency_ms) if getattr(m, "ok", False) else None
    try:
        now = measure_ms(reference_graph(), backend_id)
    except Exception as err:  # noqa: BLE001 - a check never stops the work it accompanies
        logger.warning("speed reference: measuring failed (%s); not compared", err)
        return None
    if now is None or not (math.isfinite(now) and now > 0):
        return None
    ratio = now / base["median_ms"]
    return {"now_ms": now, "build_ms": base["median_ms"], "build_probes": base["probes"],
            "ratio": ratio,
            "warning": speed_change_warning(ratio, "this measurement",
                                            "this predictor's build")}


class SpeedReference:
    """Probes of :func:`reference_graph` appended to ``<directory>/speed_reference.jsonl``.

    :meth:`probe` measures at most once every ``every_s`` seconds unless forced; a probe
    that fails is logged and skipped (it never stops the work it accompanies). ``tag``
    names the record's set where several share a folder (a model set's ``seed1000``)."""

    def __init__(self, directory: str | os.PathLike[str], *,
                 every_s: float = PROBE_EVERY_S, tag: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory)
        self.tag = tag
        #: the probes already in the record when this object was made (an earlier build
        #: of the same dataset, or an earlier run of the same set)
        self.earlier: list[dict[str, Any]] = read_reference(self.directory, tag=tag)
        self.every_s = float(every_s)
        self._clock = clock
        self._last: float | None = None
        self._graph: Any = None
        #: the probes this object made (the record may hold earlier ones)
        self.points: list[dict[str, Any]] = []

    def due(self) -> bool:
        return self._last is None or self._clock() - self._last >= self.every_s

    def probe(self, profiler: Any, phase: str, *, force: bool = False
              ) -> dict[str, Any] | None:
        """Measure the reference with ``profiler`` and record it (``phase`` names what was
        going on); None when not due or when the measurement failed."""
        if not force and not self.due():
            return None
        if self._graph is None:
            self._graph = reference_graph()
        self._last = self._clock()
        try:
            m = profiler.measure(self._graph, on_error="record")
        except Exception as err:  # noqa: BLE001 - a probe never stops the work
            logger.warning("speed reference: measuring failed (%s); skipped", err)
            return None
        ms = float(getattr(m, "latency_ms", float("nan")))
        if not getattr(m, "ok", False) or not (math.isfinite(ms) and ms > 0):
            logger.warning("speed reference: measuring failed (%s); skipped",
                           getattr(m, "error", "no time"))
            return None
        device = getattr(m, "device", None)
        point = {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"), "phase": phase,
                 "latency_ms": float(m.latency_ms),
                 "spread": float(m.spread) if getattr(m, "spread", None) is not None
                 else None,
                 "fingerprint_id": getattr(device, "fingerprint_id", None)}
        memory = (getattr(m, "extra", None) or {}).get("memory_ratio")
        if memory is not None:  # how slow the host's memory ran (another tenant's traffic)
            point["memory_ratio"] = float(memory)
        if self.tag is not None:
            point["set"] = self.tag
        from nnmeter.predictors.dataset import append_jsonl

        append_jsonl(self.directory / REFERENCE_FILE, point)
        self.points.append(point)
        return point

    def watch(self, profiler: Any, phase: str, start: str = "start") -> "ProbingProfiler":
        """Probe now through ``profiler`` (the start of the work; ``start`` labels that
        probe) and hand back the profiler that probes again whenever one is due while
        ``phase`` runs."""
        self.probe(profiler, start, force=True)
        return ProbingProfiler(profiler, self, phase)

    @contextlib.contextmanager
    def around(self, backend_id: str, phase: str = "calibrate") -> Iterator[None]:
        """A forced probe before the block (``phase``) and one after it (``end``), each
        through a profiler of its own (:meth:`probe_with_own_profiler`)."""
        self.probe_with_own_profiler(backend_id, phase)
        yield
        self.probe_with_own_profiler(backend_id, "end")

    def probe_with_own_profiler(self, backend_id: str, phase: str) -> dict[str, Any] | None:
        """A forced probe through a profiler of its own (between phases whose profilers
        are closed), opened as the build opens its own."""
        from nnmeter.backends import Profiler

        try:
            with Profiler(backend_id) as prof:
                return self.probe(prof, phase, force=True)
        except Exception as err:  # noqa: BLE001 - a probe never stops the work
            logger.warning("speed reference: no profiler for %s (%s); skipped",
                           backend_id, err)
            return None


class ProbingProfiler:
    """A profiler that probes the speed reference before a measurement whenever one is
    due (:meth:`SpeedReference.probe`), and is otherwise the profiler it wraps."""

    def __init__(self, profiler: Any, reference: SpeedReference, phase: str) -> None:
        self._inner = profiler
        self._reference = reference
        self._phase = phase

    def measure(self, graph: Any, *args: Any, **kwargs: Any) -> Any:
        if self._reference.due():
            self._reference.probe(self._inner, self._phase)
        return self._inner.measure(graph, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
