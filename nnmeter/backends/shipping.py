"""Models sent to a worker that cannot read this machine's files (an ssh or Ray runner).

A request names its model by content (``model_sha256`` and ``model_name``) and carries
the bytes (``model_data``, base64) only when the worker may not have them yet. The
worker keeps what it received in an :class:`ModelInbox` (least recently used first
out past a size limit), so a model measured again (another pass, another round of a
model-level set) is not sent again; a worker that does not hold the model answers
``error_kind: "need_model"`` and the parent sends it with its bytes.

Examples
--------
>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> (d / "m.onnx").write_bytes(b"abc")
3
>>> shipper, inbox = ModelShipper(), ModelInbox(tempfile.mkdtemp())
>>> first = shipper.fields(d / "m.onnx")
>>> "model_data" in first, "model_data" in shipper.fields(d / "m.onnx")
(True, False)
>>> pathlib.Path(inbox.path_for(first)).read_bytes()
b'abc'
>>> inbox.path_for({**first, "model_sha256": "0" * 64, "model_data": None}) is None
True
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

__all__ = ["ModelShipper", "ModelInbox", "INBOX_LIMIT_BYTES"]

#: a worker keeps at most this many bytes of received models
INBOX_LIMIT_BYTES = 2 << 30


class ModelShipper:
    """The parent's side: which models this worker was sent (reset when it restarts)."""

    def __init__(self) -> None:
        self.sent: set[str] = set()
        self._digests: dict[tuple[str, int, int], str] = {}

    def digest(self, path: str | Path) -> str:
        st = os.stat(path)
        key = (str(path), st.st_size, st.st_mtime_ns)
        sha = self._digests.get(key)
        if sha is None:
            h = hashlib.sha256()
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            sha = self._digests[key] = h.hexdigest()
        return sha

    def fields(self, path: str | Path, *, force: bool = False) -> dict[str, Any]:
        """The request fields for ``path``: its hash and name, and its bytes unless
        this worker was sent them already (``force`` sends them anyway)."""
        sha = self.digest(path)
        out: dict[str, Any] = {"model_sha256": sha, "model_name": Path(path).name}
        if force or sha not in self.sent:
            out["model_data"] = base64.b64encode(Path(path).read_bytes()).decode("ascii")
            self.sent.add(sha)
        return out

    def reset(self) -> None:
        """The worker restarted: it holds nothing."""
        self.sent.clear()


class ModelInbox:
    """The worker's side: received models by content hash, in ``folder``."""

    def __init__(self, folder: str | Path, limit_bytes: int = INBOX_LIMIT_BYTES) -> None:
        self.folder = Path(folder)
        self.limit = limit_bytes
        self.files: OrderedDict[str, Path] = OrderedDict()

    def path_for(self, req: dict[str, Any]) -> str | None:
        """The local path of the request's model, writing its bytes if it carries them;
        None when it carries none and this inbox does not hold it (``need_model``)."""
        sha = str(req["model_sha256"])
        path = self.files.get(sha)
        if path is not None and path.exists():
            self.files.move_to_end(sha)
            return str(path)
        data = req.get("model_data")
        if data is None:
            return None
        name = os.path.basename(str(req.get("model_name") or "model")) or "model"
        path = self.folder / f"{sha[:16]}-{name}"
        raw = base64.b64decode(data)
        if hashlib.sha256(raw).hexdigest() != sha:
            raise ValueError(f"the model {name} arrived damaged (its sha256 differs)")
        path.write_bytes(raw)
        self.files[sha] = path
        self._evict()
        return str(path)

    def _evict(self) -> None:
        sizes = {sha: p.stat().st_size for sha, p in self.files.items() if p.exists()}
        total = sum(sizes.values())
        while total > self.limit and len(self.files) > 1:
            sha, path = self.files.popitem(last=False)
            total -= sizes.get(sha, 0)
            path.unlink(missing_ok=True)
