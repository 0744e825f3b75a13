"""The base of the runners' profilers: a worker that is not a local subprocess."""

from __future__ import annotations

from typing import Any

from nnmeter.backends.profiler import Profiler

__all__ = ["RemoteProfiler"]


class RemoteProfiler(Profiler):
    """A :class:`~nnmeter.backends.Profiler` whose worker runs where ``spec`` says.

    Made by ``Profiler(...)`` inside :func:`nnmeter.farm.use_runner`, or directly with
    ``spec=``. The worker cannot read this machine's files (models travel with the
    jobs) and holds its own machine's timing lock; ``core`` is resolved there
    (``"auto"``: the highest core the worker may use), since this machine's cores say
    nothing about the remote's.
    """

    #: the RunnerSpec kind this profiler serves
    kind = ""
    ships_models = True
    locks_here = False

    def __init__(self, backend_id: str, *, protocol: Any = None,
                 core: int | str | None = "auto", python: str | None = None,
                 spec: Any = None) -> None:
        from nnmeter.farm import current_runner

        super().__init__(backend_id, protocol=protocol, core=None, python=python)
        self.spec = spec or current_runner()
        if self.spec is None or self.spec.kind != self.kind:
            raise ValueError(f"{type(self).__name__} needs a {self.kind} RunnerSpec "
                             f"(spec= or inside use_runner)")
        self.core = core
