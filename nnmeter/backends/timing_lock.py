"""One machine-wide lock that every nnmeter measurement holds while it times.

Two nnmeter jobs that time at once on one machine share its cores, caches and memory
bandwidth, and each measures the other. Every :class:`~nnmeter.backends.Profiler` job
(a measurement or a profile) therefore holds an exclusive ``flock`` on one file for as
long as its worker runs the job, so parallel jobs queue instead of colliding.

- The file is ``$NNMETER_TIMING_LOCK``, default ``/tmp/nnmeter-timing.lock`` (one per
  machine, whatever the user). ``NNMETER_TIMING_LOCK=off`` disables the lock.
- A job waits at most ``NNMETER_TIMING_LOCK_WAIT_S`` seconds (default 900). Past that
  it measures anyway and says so: a job stuck behind a hung one must not hang too.
- Re-entrant within a process: a job started while this process already holds the lock
  (a nested profiler) does not wait for itself.

Examples
--------
>>> import os, tempfile
>>> os.environ["NNMETER_TIMING_LOCK"] = os.path.join(tempfile.mkdtemp(), "t.lock")
>>> with timing_lock() as held:
...     held.state
'held'
>>> del os.environ["NNMETER_TIMING_LOCK"]
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Iterator

__all__ = ["LockState", "timing_lock", "lock_path", "DEFAULT_LOCK", "DEFAULT_WAIT_S"]

DEFAULT_LOCK = "/tmp/nnmeter-timing.lock"
DEFAULT_WAIT_S = 900.0

_local = threading.RLock()
_depth = 0


@dataclass
class LockState:
    """How a job got the machine: ``state`` is ``held`` (it had the lock), ``nested``
    (this process held it already), ``timeout`` (it waited ``wait_s`` and went on
    without it), ``off`` (disabled) or ``unavailable`` (no flock on this system, or the
    file cannot be opened: ``why``)."""

    state: str
    wait_ms: float = 0.0
    path: str = ""
    why: str = ""

    def as_extra(self) -> dict[str, object]:
        """The fields a Measurement's ``extra`` records."""
        out: dict[str, object] = {"timing_lock": self.state,
                                  "lock_wait_ms": round(self.wait_ms, 3)}
        if self.why:
            out["timing_lock_why"] = self.why
        return out


def lock_path() -> str | None:
    """The lock file this process uses; None when disabled."""
    value = os.environ.get("NNMETER_TIMING_LOCK", DEFAULT_LOCK).strip()
    return None if value.lower() in ("off", "0", "none", "") else value


def _wait_limit() -> float:
    try:
        return max(0.0, float(os.environ.get("NNMETER_TIMING_LOCK_WAIT_S", DEFAULT_WAIT_S)))
    except ValueError:
        return DEFAULT_WAIT_S


@contextlib.contextmanager
def timing_lock(wait_s: float | None = None) -> Iterator[LockState]:
    """Hold the machine's timing lock for the duration of the block (see the module)."""
    global _depth
    path = lock_path()
    if path is None:
        yield LockState("off")
        return
    with _local:
        if _depth:
            _depth += 1
            try:
                yield LockState("nested", path=path)
            finally:
                _depth -= 1
            return
        try:
            import fcntl
        except ImportError:
            yield LockState("unavailable", path=path, why="no fcntl on this system")
            return
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as err:
            yield LockState("unavailable", path=path, why=str(err))
            return
        with contextlib.suppress(OSError):
            os.chmod(path, 0o666)  # any user's nnmeter may queue on it
        limit = _wait_limit() if wait_s is None else wait_s
        t0 = time.monotonic()
        state = "held"
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() - t0 >= limit:
                        state = "timeout"
                        break
                    time.sleep(0.05)
            _depth += 1
            try:
                yield LockState(state, wait_ms=(time.monotonic() - t0) * 1000, path=path)
            finally:
                _depth -= 1
        finally:
            os.close(fd)  # closing releases the flock
