"""The resumable record of a detection's measurements: by graph signature, in JSONL.

Identical models (same structure, :func:`~nnmeter.fusion.testcases.graph_signature`)
are measured once and shared between cases. Every measurement, and every record that
profiling a model gave (its edge-conversion share, whether it is a view), is appended
as one JSON line to a partial journal next to the output file, so an interrupted run
resumes where it stopped; a line cut by a crash is skipped on reading.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nnmeter.errors import MeasurementError
from nnmeter.fusion.decision import Timing
from nnmeter.fusion.testcases import graph_signature
from nnmeter.ir.graph import ModelGraph

__all__ = ["MeasurementJournal"]

logger = logging.getLogger(__name__)


class MeasurementJournal:
    """Measurements by graph signature, with a JSONL journal for resuming.

    ``measure`` measures one model (a :class:`~nnmeter.backends.Measurement`); with
    ``resume``, the rows of an existing ``journal`` are read back, else it is removed.
    ``journal=None`` keeps everything in memory.
    """

    def __init__(self, measure: Callable[[ModelGraph], Any], journal: Path | None,
                 resume: bool) -> None:
        self._measure = measure
        self.journal = journal
        self.rows: dict[str, list[dict[str, Any]]] = {}
        #: edge-conversion share of each profiled model: {"share": float | None, "why": str}
        self.edges: dict[str, dict[str, Any]] = {}
        #: whether a pass-through model's flatten runs no kernel: {"view": bool | None, "why"}
        self.views: dict[str, dict[str, Any]] = {}
        self.device: dict[str, Any] | None = None
        self.fresh = 0
        if journal is not None and resume and journal.exists():
            for line in journal.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
                if "edge" in row:
                    self.edges[row["sig"]] = row["edge"]
                elif "view" in row:
                    self.views[row["sig"]] = row["view"]
                else:
                    self.rows.setdefault(row["sig"], []).append(row["m"])
            logger.info("resuming from %s (%d models measured)", journal, len(self.rows))
        elif journal is not None and journal.exists():
            journal.unlink()

    def _journal(self, row: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            with self.journal.open("a") as f:
                f.write(json.dumps(row) + "\n")

    def _append(self, sig: str, m: dict[str, Any]) -> None:
        self.rows.setdefault(sig, []).append(m)
        self._journal({"sig": sig, "m": m})

    def record_edge(self, sig: str, rec: dict[str, Any]) -> None:
        """Keep and journal the edge-conversion record of the model ``sig``."""
        self.edges[sig] = rec
        self._journal({"sig": sig, "edge": rec})

    def record_view(self, sig: str, rec: dict[str, Any]) -> None:
        """Keep and journal the view record of the model ``sig``."""
        self.views[sig] = rec
        self._journal({"sig": sig, "view": rec})

    def measure_new(self, graph: ModelGraph) -> dict[str, Any]:
        """Measure ``graph`` once more; keep and journal the row if it succeeded."""
        m = self._measure(graph)
        d = m.as_dict()
        if m.ok and m.device is not None and self.device is None:
            self.device = m.device.as_dict()
        self.fresh += 1
        if m.ok:
            self._append(graph_signature(graph), d)
        return d

    def ensure(self, graph: ModelGraph) -> None:
        """Measure ``graph`` unless a successful row on this device is already kept.

        Raises
        ------
        MeasurementError
            If the measurement fails.
        """
        sig = graph_signature(graph)
        ok = [m for m in self.rows.get(sig, []) if m.get("ok")]
        if self.device is not None:
            ok = [m for m in ok if (m.get("device") or {}).get("fingerprint_id")
                  == self.device["fingerprint_id"]]
        if not ok:
            d = self.measure_new(graph)
            if not d.get("ok"):
                raise MeasurementError(
                    f"measuring {graph.name} failed: {d.get('error')}")
        elif self.device is None:
            self.device = ok[0].get("device")

    def disturbed(self, graph: ModelGraph) -> bool:
        """True when ``graph`` has one kept measurement and it was disturbed (spread over
        10 %, many preempted runs, the timing lock timed out: ``quality_warnings``):
        a decision on it is measured again even outside the noise, since load can turn
        a fusion into "not fused"."""
        from nnmeter.backends.base import Measurement

        ms = [m for m in self.rows.get(graph_signature(graph), []) if m.get("ok")]
        return len(ms) == 1 and bool(Measurement.from_dict(ms[0]).quality_warnings())

    def timing(self, graph: ModelGraph) -> Timing:
        """The time of ``graph`` over every kept repeat (minimum) and its spread."""
        sig = graph_signature(graph)
        ms = [m for m in self.rows.get(sig, []) if m.get("ok")]
        if self.device is not None:
            ms = [m for m in ms if (m.get("device") or {}).get("fingerprint_id")
                  == self.device["fingerprint_id"]] or ms
        lat = sorted(float(m["latency_ms"]) for m in ms)
        spreads = sorted(float(m["spread"]) for m in ms if m.get("spread") is not None)
        spread = spreads[len(spreads) // 2] if spreads else 0.0
        if len(lat) > 1:
            # the time is the minimum over repeats: how well it is known is how close the
            # next-best repeat comes, not how slow the worst one was (interference only
            # ever adds time, so one disturbed repeat says nothing about the minimum)
            spread = max(spread, (lat[1] - lat[0]) / lat[0])
        return Timing(lat[0], spread, len(lat), tuple(lat))
