"""Replay the same raw inputs through a pipeline (preprocessing + model) and record it.

A pipeline is a model on a backend plus an optional preprocessing function. The
function takes one raw input and returns either the model input (an array in the
model's own layout, batch first) or a dict of named steps whose *last* entry is the
model input; every step is recorded, so the deployed and the reference preprocessing
can be compared step by step::

    def preprocess(raw):
        img = resize(raw, (224, 224))
        x = img / 127.5 - 1
        return {"resize": img, "normalize": x, "input": x[None]}

Without a function the raw inputs are the model inputs in the canonical layout (NCHW);
they are transposed to the model's own layout and quantized when the model wants that.

The reference is another model file (ONNX or .tflite, float), or the deployed file
itself on another backend (``litert-cpu-ref``: TFLite's reference kernels).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import pathlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnmeter.errors import InputMismatchError, XRayError
from nnmeter.xray.instrument import Runner, open_runner

__all__ = ["Trace", "record_pipeline", "open_reference", "load_function", "load_inputs",
           "random_inputs", "as_nchw"]

logger = logging.getLogger(__name__)

Preprocess = Callable[[Any], "np.ndarray | dict[str, np.ndarray]"]


@dataclass
class Trace:
    """Everything recorded from one pipeline over all samples.

    ``values[i]`` maps tensor names to canonical float arrays for sample ``i``;
    ``steps[i]`` maps preprocessing step names to arrays (as the function returned them);
    ``outputs[i]`` are the model outputs from the backend's real run.
    """

    runner: Runner
    values: list[dict[str, np.ndarray]] = field(default_factory=list)
    steps: list[dict[str, np.ndarray]] = field(default_factory=list)
    outputs: list[list[np.ndarray]] = field(default_factory=list)
    feeds: list[dict[str, np.ndarray]] = field(default_factory=list)


def _split_steps(result: Any) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    if isinstance(result, dict):
        if not result:
            raise XRayError("the preprocessing function returned an empty dict; return the "
                            "model input, or a dict of named steps whose last is the input")
        steps = {str(k): np.asarray(v) for k, v in result.items()}
        last = list(result.values())[-1]
    else:
        steps, last = {}, result
    arrays = [np.asarray(a) for a in last] if isinstance(last, (list, tuple)) else \
        [np.asarray(last)]
    return arrays, steps


def record_pipeline(runner: Runner, raw_inputs: Sequence[Any], *,
                    preprocess: Preprocess | None = None,
                    model_inputs: Sequence[list[np.ndarray]] | None = None) -> Trace:
    """Run every raw input through ``preprocess`` (if any) and the model, recording all.

    ``model_inputs`` (canonical arrays per sample) replaces preprocessing: the reference
    then sees exactly the deployed model's inputs.

    Raises
    ------
    InputMismatchError
        If a model input has another shape or number of inputs than the model takes.
    """
    trace = Trace(runner)
    for i, raw in enumerate(raw_inputs):
        steps: dict[str, np.ndarray] = {}
        if model_inputs is not None:
            feeds = runner.feeds_from_canonical(list(model_inputs[i]))
        elif preprocess is not None:
            try:
                arrays, steps = _split_steps(preprocess(raw))
            except XRayError:
                raise
            except (ValueError, TypeError, IndexError, KeyError) as err:
                raise XRayError(f"the preprocessing function failed on input {i}: "
                                f"{type(err).__name__}: {err}") from err
            feeds = runner.feeds_from_native(arrays)
        else:
            arrays = [np.asarray(a) for a in raw] if isinstance(raw, (list, tuple)) else \
                [np.asarray(raw)]
            arrays = [a[None] if a.ndim == len(s.shape) - 1 else a
                      for a, s in zip(arrays, runner.input_specs)]
            feeds = runner.feeds_from_canonical(arrays)
        trace.feeds.append(feeds)
        trace.values.append(runner.record(feeds))
        trace.outputs.append(runner.run(feeds))
        trace.steps.append(steps)
    return trace


def open_reference(deployed: Runner, reference: str | pathlib.Path | None,
                   backend: str | None = None) -> Runner:
    """Open the reference pipeline's model.

    ``None`` or the deployed file itself means the deployed file on the reference backend
    (``litert-cpu-ref`` for .tflite; other formats need a reference file).
    """
    same = reference is None or pathlib.Path(str(reference)).resolve() == deployed.path.resolve()
    if same:
        if deployed.fmt != "tflite":
            raise XRayError(f"{deployed.path.name} needs a reference model: pass the float "
                            f"model it was made from (--reference model.onnx)")
        backend = backend or ("litert-cpu" if deployed.backend.startswith("litert-cpu-ref")
                              else "litert-cpu-ref")
        return open_runner(deployed.path, backend)
    return open_runner(reference, backend)


def check_compatible(deployed: Runner, reference: Runner) -> None:
    """Raise InputMismatchError unless both models take the same inputs (canonical)."""
    d, r = deployed.input_specs, reference.input_specs
    if len(d) != len(r):
        raise InputMismatchError(
            f"the deployed model takes {len(d)} input(s) {[s.name for s in d]} but the "
            f"reference takes {len(r)} {[s.name for s in r]}; pass the reference the "
            f"deployed model was made from")
    for a, b in zip(d, r):
        if a.shape != b.shape:
            raise InputMismatchError(
                f"input {a.name!r} of the deployed model has canonical shape {a.shape} "
                f"(native {a.native_shape}), the reference's {b.name!r} has {b.shape}; both "
                f"models must take the same input size (re-export one of them)")
        kinds = {np.dtype(a.dtype).kind, np.dtype(b.dtype).kind}
        if kinds - {"f"} and not (a.quant or b.quant) and len(kinds) > 1:
            raise InputMismatchError(
                f"input {a.name!r} is {a.dtype} in the deployed model and {b.dtype} in the "
                f"reference, with no quantization parameters to convert between them")


def load_function(spec: str) -> Preprocess:
    """Import ``module:function`` (or ``path/to/file.py:function``)."""
    mod_name, _, fn_name = spec.rpartition(":")
    if not mod_name or not fn_name:
        raise XRayError(f"{spec!r} is not module:function; write e.g. mypkg.prep:preprocess")
    try:
        if mod_name.endswith(".py"):
            path = pathlib.Path(mod_name)
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            if module_spec is None or module_spec.loader is None:
                raise ImportError(f"cannot load {path}")
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
        return getattr(module, fn_name)
    except (ImportError, AttributeError, FileNotFoundError) as err:
        raise XRayError(f"cannot load the function {spec!r}: {err}") from err


def load_inputs(directory: str | pathlib.Path) -> list[np.ndarray]:
    """Raw inputs from a folder: ``.npy`` arrays and ``.png``/``.jpg`` images, sorted."""
    d = pathlib.Path(directory)
    if not d.is_dir():
        raise XRayError(f"--inputs {str(d)!r} is not a folder; give a folder of .npy, .png "
                        f"or .jpg files")
    out = []
    for p in sorted(d.iterdir()):
        if p.suffix.lower() == ".npy":
            out.append(np.load(p, allow_pickle=False))
        elif p.suffix.lower() in (".png", ".jpg", ".jpeg", ".bmp"):
            import matplotlib.image as mpimg

            img = mpimg.imread(p)
            if img.dtype != np.uint8:
                img = np.round(np.clip(img, 0, 1) * 255).astype(np.uint8)
            out.append(img[..., :3] if img.ndim == 3 else img)
    if not out:
        raise XRayError(f"no .npy, .png or .jpg files in {str(d)!r}")
    return out


def random_inputs(runner: Runner, n: int, *, seed: int = 0,
                  for_preprocess: bool = False) -> list[Any]:
    """``n`` smooth random inputs for ``runner``'s model.

    Images (rank-4 inputs) are smooth random pictures: float in [0, 1], canonical NCHW,
    or, ``for_preprocess``, raw HWC uint8 pictures 1.5 times the model's size.
    """
    from nnmeter.xray.checks import smooth_images

    rng = np.random.default_rng(seed)
    samples: list[Any] = []
    for i in range(n):
        arrays = []
        for spec in runner.input_specs:
            shape = tuple(max(1, d) for d in spec.shape)
            if len(shape) == 4 and shape[1] in (1, 3, 4):
                h, w = shape[2], shape[3]
                if for_preprocess:
                    arrays.append(smooth_images(1, h * 3 // 2, w * 3 // 2,
                                                channels=shape[1], seed=seed + i)[0])
                    continue
                img = smooth_images(shape[0], h, w, channels=shape[1], seed=seed + i)
                arrays.append(img.transpose(0, 3, 1, 2).astype(np.float32) / 255.0)
            else:
                arrays.append(rng.standard_normal(shape).astype(np.float32))
        samples.append(arrays if len(arrays) > 1 else arrays[0])
    return samples


def as_nchw(x: np.ndarray) -> np.ndarray:
    """Best guess of a canonical (N, C, H, W) view of an image-like array (HWC, NHWC,
    CHW or NCHW); other arrays come back unchanged."""
    x = np.asarray(x)
    if x.ndim == 3:
        x = x[None]
    if x.ndim != 4:
        return x
    if x.shape[1] not in (1, 3, 4) and x.shape[-1] in (1, 3, 4):
        return np.transpose(x, (0, 3, 1, 2))
    return x


