"""Test-wide setup: runtimes that write into the home folder get a temporary one."""

from __future__ import annotations

import os
import tempfile

# onnxruntime, openvino, keras and matplotlib write caches and telemetry state into the
# home folder; give the whole test session a throw-away one before any of them loads.
_HOME = tempfile.mkdtemp(prefix="nnmeter-test-home-")
os.environ["HOME"] = _HOME
os.environ["XDG_CACHE_HOME"] = os.path.join(_HOME, ".cache")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("OPENVINO_TELEMETRY_OPT_OUT", "1")
