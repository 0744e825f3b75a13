"""Fusion rules: the detected facts about one backend, as a validated JSON file.

File layout (``fusion_rules/<backend-id>.json``, ``schema_version`` 1)::

    {
      "schema_version": 1,
      "backend_id": "ort-cpu",
      "device": {...DeviceInfo fields..., "fingerprint_id": "..."},
      "alpha": 0.5,
      "shapes": {"hw": 28, "cin": 64, "cout": 128, "kernel": 3, "stride": 1,
                 "pool_stride": 2, "fc_width": 428},
      "created": "2025-01-01T00:00:00Z",
      "patterns": [
        {"name": "conv->relu", "kind": "pair", "ops": ["conv", "relu"],
         "fused": true, "close": false,
         "times_ms": {"op1": {"latency_ms": .., "spread": ..}, "op2": {..}, "block": {..}},
         "saving_ms": .., "threshold_ms": .., "extra": {}},
        ...
      ]
    }

``saving_ms`` and ``threshold_ms`` are on times net of the per-inference overhead
(``extra.overhead_ms``) and, where the backend's profiler times its executed nodes, of
each model's edge layout/precision conversions (``extra.edge``: ``share`` and
``removed_ms`` per model, or ``skipped`` with the reason); ``extra.raw`` repeats the
decision of the raw rule on the measured times; ``extra.tie`` marks a decision still
within the noise after re-measuring, which is recorded as not fused (see
:mod:`nnmeter.fusion.decision`). ``shapes`` are the test-case shapes
(:class:`~nnmeter.fusion.testcases.TestShapes`) the file was detected with.

``kind`` is ``pair`` (op1 → op2), ``multi_output`` (one producer, two consumers;
``extra.hypotheses`` and ``extra.chosen``), ``multi_input`` (two computed branches into
add/concat) or ``block`` (a multi-op subgraph such as ``se``; ``extra.block`` names it).

Examples
--------
>>> r = FusionRules.from_decisions("toy", pairs={("conv", "relu"): True})
>>> r.fuses("conv", "relu"), r.fuses("relu", "conv")
(True, False)
>>> FusionRules.from_dict(r.to_dict()) == r
True
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnmeter.errors import FusionRulesError

__all__ = [
    "SCHEMA_VERSION", "PATTERN_KINDS", "BLOCKS", "Pattern", "FusionRules", "load_rules",
    "rules_dir", "rules_path",
]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
PATTERN_KINDS = ("pair", "multi_output", "multi_input", "block")
#: Multi-op blocks the partitioner matches as subgraphs before pairwise fusion.
BLOCKS = ("se", "hswish", "hsigmoid", "channelshuffle", "gap")

# op names used for rule lookups: ops that behave alike share the tested entry
_RULE_OP = {"flatten": "reshape", "clip": "relu6"}


def rule_op(op: str) -> str:
    """The op name under which ``op`` is looked up in the rules."""
    return _RULE_OP.get(op, op)


@dataclass(frozen=True)
class Pattern:
    """One tested pattern and its decision. Times are milliseconds."""

    name: str
    kind: str
    ops: tuple[str, ...]
    fused: bool
    close: bool = False
    times_ms: Mapping[str, Any] = field(default_factory=dict, hash=False)
    saving_ms: float | None = None
    threshold_ms: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "ops": list(self.ops),
            "fused": self.fused, "close": self.close, "times_ms": dict(self.times_ms),
            "saving_ms": self.saving_ms, "threshold_ms": self.threshold_ms,
            "extra": dict(self.extra),
        }


def _fail(where: str, problem: str) -> FusionRulesError:
    return FusionRulesError(
        f"fusion rules {where}: {problem}; regenerate the file with "
        f"`nnmeter detect-fusion --backend <id>`"
    )


def _pattern_from_dict(d: Any, where: str, i: int) -> Pattern:
    if not isinstance(d, dict):
        raise _fail(where, f"patterns[{i}] is {type(d).__name__}, expected an object")
    for key, typ in (("name", str), ("kind", str), ("ops", list), ("fused", bool)):
        if key not in d:
            raise _fail(where, f"patterns[{i}] lacks {key!r}")
        if not isinstance(d[key], typ):
            raise _fail(where, f"patterns[{i}].{key} is {type(d[key]).__name__}, "
                               f"expected {typ.__name__}")
    if d["kind"] not in PATTERN_KINDS:
        raise _fail(where, f"patterns[{i}].kind {d['kind']!r} is not one of {PATTERN_KINDS}")
    if not all(isinstance(o, str) for o in d["ops"]):
        raise _fail(where, f"patterns[{i}].ops must be a list of op names")
    times = d.get("times_ms", {})
    if not isinstance(times, dict):
        raise _fail(where, f"patterns[{i}].times_ms must be an object")
    for role, t in times.items():
        if not isinstance(t, dict) or not isinstance(t.get("latency_ms"), (int, float)):
            raise _fail(where, f"patterns[{i}].times_ms[{role!r}] needs a numeric latency_ms")
    return Pattern(
        name=d["name"], kind=d["kind"], ops=tuple(d["ops"]), fused=d["fused"],
        close=bool(d.get("close", False)), times_ms=times,
        saving_ms=d.get("saving_ms"), threshold_ms=d.get("threshold_ms"),
        extra=d.get("extra", {}) or {},
    )


@dataclass(frozen=True)
class FusionRules:
    """Detected fusion rules of one backend (see the module docstring for the file).

    Lookups of patterns that were never tested answer "not fused", except
    :meth:`multi_input_fuses`, which defaults to True so that pair rules decide.
    """

    backend_id: str
    device: Mapping[str, Any] = field(default_factory=dict, hash=False)
    alpha: float = 0.5
    shapes: Mapping[str, Any] = field(default_factory=dict, hash=False)
    patterns: tuple[Pattern, ...] = ()
    created: str = ""
    schema_version: int = SCHEMA_VERSION

    # -- lookups ---------------------------------------------------------------
    def _index(self) -> dict[tuple[str, tuple[str, ...]], Pattern]:
        idx = self.__dict__.get("_idx")
        if idx is None:
            idx = {}
            for p in self.patterns:
                key = p.extra.get("block") if p.kind == "block" else None
                idx[(p.kind, (key,) if key else p.ops)] = p
            object.__setattr__(self, "_idx", idx)
        return idx

    def pattern(self, kind: str, ops: tuple[str, ...]) -> Pattern | None:
        """The tested pattern of ``kind`` over ``ops`` (block: ``(block_name,)``), or None."""
        return self._index().get((kind, tuple(ops)))

    def fuses(self, op1: str, op2: str) -> bool:
        """True when the backend runs ``op1 → op2`` as one kernel. ``identity`` always fuses."""
        if op2 == "identity":
            return True
        p = self.pattern("pair", (rule_op(op1), rule_op(op2)))
        return bool(p and p.fused)

    def multi_consumer_fuses(self, op: str) -> bool:
        """True when a node ``op`` whose output has several consumers still fuses forward."""
        for p in self.patterns:
            if p.kind == "multi_output" and p.ops and p.ops[0] == rule_op(op):
                return p.fused
        return False

    def multi_input_fuses(self, op: str) -> bool:
        """False only when the two-branch test of ``op`` (add, concat) found no fusion."""
        for p in self.patterns:
            if p.kind == "multi_input" and p.ops and p.ops[-1] == rule_op(op):
                return p.fused
        return True

    def multi_input_decision(self, branch: str, join: str) -> bool | None:
        """The two-branch test's decision for ``branch`` ops joined by ``join`` (e.g.
        conv, add: does a residual add fuse into the conv that computes one of its
        operands?), or None when that combination was not tested.

        Unlike the ``branch -> join`` pair test, whose second operand is a graph input,
        both operands here are computed, as in a residual block; runtimes can fuse one
        case and not the other (ONNX Runtime's NCHWc conv fuses a Sum with a computed
        NCHWc operand only).
        """
        for p in self.patterns:
            if (p.kind == "multi_input" and len(p.ops) >= 2 and p.ops[-1] == rule_op(join)
                    and p.ops[0] == rule_op(branch)):
                return p.fused
        return None

    def join_operand(self, join: str) -> str | None:
        """Which computed operand's kernel takes a ``join`` (add) that fuses into a
        convolution, as the runtime's own graph showed (:mod:`nnmeter.fusion.joins`):
        ``"first"`` (the first operand produced by a convolution-like op with no other
        reader), ``"order"`` or None (not known: the partitioner's walk decides)."""
        op = self._join_extra(join, "operand")
        return op if op in ("first", "order") else None

    def join_needs_last_reader(self, join: str) -> bool:
        """Whether a ``join`` (add) fuses into a convolution only when it is the last
        reader of its other operand, as the runtime's own graph showed (OpenVINO sums in
        place, into that operand's buffer; :mod:`nnmeter.fusion.joins`)."""
        return self._join_extra(join, "needs_last_reader") is True

    def _join_extra(self, join: str, key: str) -> Any:
        """``key`` of the first two-branch pattern ending in ``join`` that records it
        (the join probe's answers, :mod:`nnmeter.fusion.joins`), else None."""
        for p in self.patterns:
            if p.kind == "multi_input" and p.ops and p.ops[-1] == rule_op(join):
                value = p.extra.get(key)
                if value is not None:
                    return value
        return None

    def block_fused(self, block: str) -> bool:
        """True when the multi-op ``block`` (see :data:`BLOCKS`) runs as one kernel."""
        p = self.pattern("block", (block,))
        return bool(p and p.fused)

    @property
    def fingerprint_id(self) -> str:
        return str(self.device.get("fingerprint_id", ""))

    def summary(self) -> dict[str, Any]:
        """Counts of tested and fused patterns per kind, and the fused pair names."""
        out: dict[str, Any] = {"backend_id": self.backend_id, "alpha": self.alpha}
        for kind in PATTERN_KINDS:
            ps = [p for p in self.patterns if p.kind == kind]
            out[kind] = {"tested": len(ps), "fused": sum(p.fused for p in ps),
                         "close": sum(p.close for p in ps)}
        out["fused_pairs"] = [p.name for p in self.patterns if p.kind == "pair" and p.fused]
        return out

    # -- JSON ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version, "backend_id": self.backend_id,
            "device": dict(self.device), "alpha": self.alpha, "shapes": dict(self.shapes),
            "created": self.created, "patterns": [p.as_dict() for p in self.patterns],
        }

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """Serialise; also write ``path`` (atomically) when given."""
        text = json.dumps(self.to_dict(), indent=1, sort_keys=False)
        if path is not None:
            from nnmeter.predictors.store import write_atomic

            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, (text + "\n").encode())
        return text

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "<dict>") -> "FusionRules":
        """Validate and load a rules dict.

        Raises
        ------
        FusionRulesError
            On a wrong schema version, a missing or mistyped field, or a bad pattern.
        """
        if not isinstance(data, dict):
            raise _fail(where, f"top level is {type(data).__name__}, expected an object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise _fail(where, f"schema_version is {version!r}, this nnmeter reads "
                               f"{SCHEMA_VERSION}")
        for key, typ in (("backend_id", str), ("device", dict), ("alpha", (int, float)),
                         ("patterns", list)):
            if key not in data:
                raise _fail(where, f"missing field {key!r}")
            if not isinstance(data[key], typ) or isinstance(data[key], bool):
                raise _fail(where, f"field {key!r} has type {type(data[key]).__name__}")
        if not 0 < float(data["alpha"]) < 10:
            raise _fail(where, f"alpha {data['alpha']} outside (0, 10)")
        patterns = tuple(_pattern_from_dict(p, where, i) for i, p in enumerate(data["patterns"]))
        names = [p.name for p in patterns]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise _fail(where, f"duplicate pattern names {sorted(dup)}")
        return cls(backend_id=data["backend_id"], device=data["device"],
                   alpha=float(data["alpha"]), shapes=data.get("shapes", {}) or {},
                   patterns=patterns, created=str(data.get("created", "")),
                   schema_version=version)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> "FusionRules":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as err:
            raise FusionRulesError(
                f"no fusion rules file at {path}; create it with "
                f"`nnmeter detect-fusion --backend <id> --out {path}`"
            ) from err
        except json.JSONDecodeError as err:
            raise _fail(str(path), f"not valid JSON ({err})") from err
        return cls.from_dict(data, where=str(path))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FusionRules) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    # -- synthetic rules (tests, what-if studies) -------------------------------
    @classmethod
    def from_decisions(cls, backend_id: str, *, pairs: Mapping[tuple[str, str], bool] = {},
                       multi_consumer: Mapping[str, bool] = {},
                       multi_input: Mapping[Any, bool] = {},
                       blocks: Mapping[str, bool] = {}, alpha: float = 0.5) -> "FusionRules":
        """Rules made from decisions alone, without measurements (for tests and studies)."""
        ps: list[Pattern] = []
        for (a, b), fused in pairs.items():
            ps.append(Pattern(f"{a}->{b}", "pair", (a, b), bool(fused)))
        for op, fused in multi_consumer.items():
            ps.append(Pattern(f"{op}->{{a,b}}", "multi_output", (op,), bool(fused)))
        for key, fused in multi_input.items():
            # "add" (the join alone) or ("conv", "add") (branch op, join op)
            if isinstance(key, tuple):
                branch, op = key
                ps.append(Pattern(f"{{{branch},{branch}}}->{op}", "multi_input",
                                  (branch, branch, op), bool(fused)))
            else:
                ps.append(Pattern(f"{{a,b}}->{key}", "multi_input", (key,), bool(fused)))
        for name, fused in blocks.items():
            ps.append(Pattern(f"block:{name}", "block", (name,), bool(fused),
                              extra={"block": name}))
        return cls(backend_id=backend_id, device={"fingerprint_id": "synthetic"},
                   alpha=alpha, patterns=tuple(ps))


def rules_dir() -> Path:
    """Folder of the committed rules: ``$NNMETER_FUSION_RULES_DIR`` or the repository's
    ``fusion_rules/`` (read at call time, never at import)."""
    env = os.environ.get("NNMETER_FUSION_RULES_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "fusion_rules"


def rules_path(backend_id: str) -> Path:
    """Where the rules of ``backend_id`` live."""
    return rules_dir() / f"{backend_id}.json"


def _shared_rules_id(backend_id: str) -> str | None:
    """The backend whose rules ``backend_id`` shares (``Backend.rules_base_id``)."""
    from nnmeter.errors import UnknownNameError

    try:
        from nnmeter.backends import get_backend

        return get_backend(backend_id).rules_base_id
    except UnknownNameError:
        return None


def load_rules(backend_id_or_path: str | os.PathLike) -> FusionRules:
    """Load and validate fusion rules by backend id (``ort-cpu``) or file path.

    A thread-suffixed id (``ort-cpu-t4``) falls back to the base id's rules when it has
    none of its own, and a backend that shares another's (``openvino-cpu-f32``:
    ``Backend.rules_base_id``) to that one's.

    Raises
    ------
    FusionRulesError
        If no file exists (the message says how to detect the rules) or it is invalid.
    """
    s = os.fspath(backend_id_or_path)
    if s.endswith(".json") or os.sep in s:
        return FusionRules.from_json(s)
    path = rules_path(s)
    if not path.exists():
        base = re.sub(r"-t\d+$", "", s)
        if base != s and rules_path(base).exists():
            logger.info("no fusion rules for %s; using those of %s", s, base)
            return FusionRules.from_json(rules_path(base))
        shared = _shared_rules_id(base)
        if shared is not None and rules_path(shared).exists():
            logger.info("no fusion rules for %s; using those of %s (the same runtime)", s,
                        shared)
            return FusionRules.from_json(rules_path(shared))
        known = sorted(p.stem for p in rules_dir().glob("*.json"))
        raise FusionRulesError(
            f"no fusion rules for backend {s!r} (looked for {path}); detected rules exist "
            f"for: {', '.join(known) or '(none)'}. Detect them with "
            f"`nnmeter detect-fusion --backend {s}`"
        )
    return FusionRules.from_json(path)
