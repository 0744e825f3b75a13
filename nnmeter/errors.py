"""The whole exception hierarchy of nnmeter.

Every error subclasses both :class:`NNMeterError` and the builtin that matches its
meaning, so callers may catch either. Messages say what was received, what is
allowed, and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "NNMeterError",
    "ModelLoadError",
    "UnsupportedOpError",
    "DynamicShapeError",
    "GraphValidationError",
    "ShapeInferenceError",
    "InputNameError",
    "UnknownNameError",
    "ExportError",
    "BackendError",
    "BackendUnavailableError",
    "MeasurementError",
    "FusionRulesError",
    "PartitionError",
    "PredictorError",
    "DatasetError",
    "FingerprintMismatchError",
    "XRayError",
    "InputMismatchError",
    "SettingsError",
    "UnknownSettingError",
    "DeviceError",
]


class NNMeterError(Exception):
    """Base class of every error nnmeter raises on purpose."""


class ModelLoadError(NNMeterError, ValueError):
    """A model file is missing, not a model, truncated or corrupt."""


class UnsupportedOpError(NNMeterError, NotImplementedError):
    """An op or an op setting that a frontend, exporter or backend cannot handle."""


class DynamicShapeError(NNMeterError, ValueError):
    """A model has dynamic dimensions and no explicit input shape was given."""


class GraphValidationError(NNMeterError, ValueError):
    """A ModelGraph breaks an invariant (cycle, disconnected node, bad shape, ...).

    ``problems`` holds every finding, each a one-line message with a fix.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[str] = list(problems or [])


class ShapeInferenceError(NNMeterError, ValueError):
    """Shapes of an op's inputs do not fit the op's attributes."""


class InputNameError(NNMeterError, KeyError):
    """An input name given by the user does not exist in the model."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class UnknownNameError(NNMeterError, KeyError):
    """A registry lookup for a name that was never registered."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ExportError(NNMeterError, RuntimeError):
    """A ModelGraph could not be exported to a runnable model file."""


class BackendError(NNMeterError, RuntimeError):
    """A runtime failed to compile or run a model; carries the runtime's message."""


class BackendUnavailableError(BackendError):
    """A backend's runtime package is not installed or cannot start here."""


class MeasurementError(NNMeterError, RuntimeError):
    """A measurement failed: worker crash, timeout, or spread that never settled."""


class FusionRulesError(NNMeterError, ValueError):
    """A fusion-rules file is missing, malformed or of another schema version."""


class PartitionError(NNMeterError, ValueError):
    """The partitioner could not split a graph into kernels."""


class PredictorError(NNMeterError, RuntimeError):
    """A predictor is missing, unfitted, or cannot cover a request."""


class DatasetError(NNMeterError, ValueError):
    """A dataset file is malformed or mixes device fingerprints."""


class FingerprintMismatchError(DatasetError):
    """Measurements from two device fingerprints were about to be mixed."""


class XRayError(NNMeterError, RuntimeError):
    """Deployment validation could not run."""


class InputMismatchError(XRayError, ValueError):
    """Deployed and reference models disagree in input count, shape or dtype."""


class SettingsError(NNMeterError, ValueError):
    """A settings record (e.g. the builder's ``BuildSettings``) got a value out of range."""


class UnknownSettingError(SettingsError, TypeError):
    """A keyword names no field of the settings record it was meant for."""


class DeviceError(NNMeterError, ValueError):
    """A device record (e.g. a stored ``CpuInfo``) is malformed: not a mapping, a field
    missing or unknown, or a field of the wrong type or out of range."""
