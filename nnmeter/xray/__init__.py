"""Deployment validation the ML-EXray way: ``xray(deployed, reference) -> XRayReport``.

Run the deployed model (and its preprocessing) and a reference pipeline on the same raw
inputs, record every intermediate tensor, align the layers of the two models, and report
the verdict (OK / FAULT), the first layer where they part, the cause when a check
recognises it (channel order, value range, layout, resize method, rotation, quantization
scale) and the kernels that run slower than they should.

Examples
--------
A complete check in a few lines (the preprocessing functions return their named steps;
the last one is the model input)::

    import numpy as np
    from nnmeter.xray import xray
    from nnmeter.xray.checks import resize_bilinear

    def app_preprocess(raw):                   # what ships in the app: HWC uint8 image
        img = resize_bilinear(raw.transpose(2, 0, 1), (32, 32))
        x = img[::-1] / 255.0                  # BGR by mistake
        return {"resize": img, "normalize": x, "input": x.transpose(1, 2, 0)[None]}

    def train_preprocess(raw):                 # what the model was trained with
        img = resize_bilinear(raw.transpose(2, 0, 1), (32, 32))
        return {"resize": img, "normalize": img / 255.0, "input": (img / 255.0)[None]}

    images = [np.load(f"img{i}.npy") for i in range(8)]
    report = xray("model.tflite", "model.onnx", inputs=images,
                  preprocess=app_preprocess, reference_preprocess=train_preprocess)
    print(report.summary())                     # verdict: FAULT, cause: channel_order
    report.to_html("xray.html")
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from nnmeter.errors import NNMeterError
from nnmeter.xray.align import align_layers
from nnmeter.xray.checks import SAME_TOL, InputCheck, check_inputs
from nnmeter.xray.diff import DEFAULT_K, DEFAULT_QUANT_THRESHOLD, DEFAULT_THRESHOLD, \
    LayerDiff, diff_layers, first_divergence, top1_agreement
from nnmeter.xray.instrument import Runner, open_runner
from nnmeter.xray.latency import check_latency
from nnmeter.xray.replay import Preprocess, Trace, as_nchw, check_compatible, load_inputs, \
    open_reference, random_inputs, record_pipeline
from nnmeter.xray.report import Finding, XRayReport

__all__ = ["xray", "XRayReport", "Finding"]

logger = logging.getLogger(__name__)

#: quantization scale off by more than this factor (either way) from what the
#: reference's value range needs is reported as the cause of a divergence
SCALE_FACTOR_LIMIT = 2.5
#: error in units of the quantization scale above which an int8 layer diverges
SCALE_ERROR_LIMIT = 4.0


def xray(deployed: str | pathlib.Path, reference: str | pathlib.Path | None = None, *,
         inputs: Sequence[Any] | str | pathlib.Path | None = None, n_random: int = 4,
         preprocess: Preprocess | None = None,
         reference_preprocess: Preprocess | None = None, backend: str | None = None,
         reference_backend: str | None = None, threshold: float = DEFAULT_THRESHOLD,
         quant_threshold: float = DEFAULT_QUANT_THRESHOLD, k: float = DEFAULT_K,
         latency: bool = True, latency_k: float = 3.0, seed: int = 0) -> XRayReport:
    """Validate a deployed model against a reference, layer by layer.

    Parameters
    ----------
    deployed : path
        The deployed model (.tflite or .onnx).
    reference : path, optional
        The reference model (float .onnx or .tflite). Default: the deployed .tflite on
        TFLite's reference kernels (``litert-cpu-ref``).
    inputs : list or folder, optional
        Raw inputs (arrays or images; a folder of .npy/.png/.jpg). Without a preprocessing
        function they are model inputs in the canonical layout (NCHW). Default:
        ``n_random`` smooth random images.
    preprocess, reference_preprocess : callable, optional
        ``fn(raw) -> model input`` or a dict of named steps whose last is the model input
        (in the model's own layout). Without ``reference_preprocess`` the reference sees
        exactly the deployed model's input.
    backend, reference_backend : str, optional
        Backend ids (default by file type: ``litert-cpu``, ``ort-cpu``).
    threshold, quant_threshold, k : float
        A layer diverges when its nRMSE exceeds the threshold (``quant_threshold`` for
        int8 layers) and ``k`` times the error at its inputs.
    latency : bool
        Also time the deployment and flag kernels ``latency_k`` times slower than on
        another resolver/backend or than predicted.

    Returns
    -------
    XRayReport

    Raises
    ------
    InputMismatchError
        If the models' inputs differ in number, shape or dtype, or an input does not fit.
    ModelLoadError
        If a model file cannot be read.
    """
    dep = open_runner(deployed, backend)
    ref = open_reference(dep, reference, reference_backend)
    check_compatible(dep, ref)
    warnings: list[str] = []
    if inputs is None:
        raw = random_inputs(dep, n_random, seed=seed, for_preprocess=preprocess is not None)
    elif isinstance(inputs, (str, pathlib.Path)):
        raw = load_inputs(inputs)
    else:
        raw = list(inputs)
    if not raw:
        raise NNMeterError("xray needs at least one input; pass inputs or n_random >= 1")
    dtrace = record_pipeline(dep, raw, preprocess=preprocess)
    if reference_preprocess is not None:
        rtrace = record_pipeline(ref, raw, preprocess=reference_preprocess)
    else:
        model_inputs = [[v[s.name] for s in dep.input_specs] for v in dtrace.values]
        rtrace = record_pipeline(ref, raw, model_inputs=model_inputs)

    findings: list[Finding] = []
    input_checks, step_check = _check_inputs(dep, ref, dtrace, rtrace, raw, findings)
    warnings += _range_warnings(dep, dtrace)

    alignment = align_layers(dep.layers, ref.layers)
    diffs = diff_layers(alignment, dep.layers, dtrace.values, rtrace.values)
    first = first_divergence(diffs, threshold=threshold, quant_threshold=quant_threshold, k=k)
    scale_first = _scale_divergence(diffs, k)
    if scale_first is not None and (first is None or diffs.index(scale_first) <
                                    diffs.index(first)):
        first = scale_first
    detail: dict[str, Any] = {}
    if first is not None:
        detail = _detail(dep, first, alignment)
        if dep.layers[first.deployed].op != "input":
            findings.append(_layer_finding(first))
        elif not findings:
            findings.append(Finding("preprocessing", f"the model input differs from the "
                                    f"reference input (nRMSE {first.nrmse:.3g})", first.deployed))

    top1 = top1_agreement([o[0] for o in dtrace.outputs if o],
                          [o[0] for o in rtrace.outputs if o])
    if dtrace.outputs and rtrace.outputs:
        ds = [np.shape(o) for o in dtrace.outputs[0]]
        rs = [np.shape(o) for o in rtrace.outputs[0]]
        if ds != rs:
            warnings.append(f"output shapes differ: deployed {ds}, reference {rs}; top-1 "
                            f"agreement not computed" if top1 is None else
                            f"output shapes differ: deployed {ds}, reference {rs}")

    lat = None
    if latency:
        try:
            lat = check_latency(dep, dtrace.feeds[0], k=latency_k)
        except NNMeterError as err:
            warnings.append(f"latency check failed: {err}")
        if lat is not None and lat.slow:
            findings.append(_latency_finding(lat))

    return XRayReport(
        deployed=str(deployed), reference=str(ref.path), backend=dep.backend,
        reference_backend=ref.backend, samples=len(raw), findings=findings,
        input_checks=input_checks, step_check=step_check, diffs=diffs,
        first_divergent=first, divergent_detail=detail,
        unaligned_deployed=alignment.unaligned_deployed,
        unaligned_reference=alignment.unaligned_reference, top1_agreement=top1,
        latency=lat, warnings=warnings,
        thresholds={"threshold": threshold, "quant_threshold": quant_threshold, "k": k,
                    "latency_k": latency_k},
    )


def _check_inputs(dep: Runner, ref: Runner, dtrace: Trace, rtrace: Trace, raw: list[Any],
                  findings: list[Finding]) -> tuple[list[InputCheck], InputCheck | None]:
    checks: list[InputCheck] = []
    for j, (ds, rs) in enumerate(zip(dep.input_specs, ref.input_specs)):
        d = np.concatenate([v[ds.name] for v in dtrace.values])
        r = np.concatenate([v[rs.name] for v in rtrace.values])
        raw_c = None
        try:
            items = [x[j] if isinstance(x, (list, tuple)) else x for x in raw]
            raw_c = np.concatenate([as_nchw(np.asarray(x, np.float64)) for x in items])
            if raw_c.ndim != d.ndim or len(raw_c) != len(d):
                raw_c = None
        except ValueError:
            raw_c = None
        checks.append(check_inputs(d, r, raw=raw_c, step=ds.name))
    step_check = _first_step_difference(dtrace, rtrace, raw)
    for chk in checks:
        if chk.same:
            continue
        cause = chk.cause
        if cause is None and step_check is not None and step_check.cause is not None:
            cause = step_check.cause
        if cause is not None:
            msg = cause.name + (f"; {cause.detail}" if cause.detail else "")
            msg += f" (explains the input difference: nRMSE {chk.plain_nrmse:.3g} -> " \
                   f"{cause.residual:.2g})"
            findings.append(Finding(cause.kind, msg, chk.step))
        else:
            where = f"; preprocessing first differs at step {step_check.step!r}" \
                if step_check else ""
            findings.append(Finding(
                "preprocessing", f"the deployed model input differs from the reference input "
                f"(nRMSE {chk.plain_nrmse:.3g}) and no check explains it{where}", chk.step))
    return checks, step_check


def _first_step_difference(dtrace: Trace, rtrace: Trace, raw: list[Any]) -> InputCheck | None:
    if not dtrace.steps or not dtrace.steps[0] or not rtrace.steps or not rtrace.steps[0]:
        return None
    common = [s for s in dtrace.steps[0] if s in rtrace.steps[0]]
    prev = np.concatenate([as_nchw(np.asarray(x, np.float64)) for x in raw]) \
        if all(isinstance(x, np.ndarray) for x in raw) else None
    for name in common:
        d = np.concatenate([as_nchw(s[name]) for s in dtrace.steps]).astype(np.float64)
        r = np.concatenate([as_nchw(s[name]) for s in rtrace.steps]).astype(np.float64)
        if d.shape != r.shape:
            return InputCheck(False, float("nan"), None, (), name)
        span = float(r.max() - r.min()) or 1.0
        if float(np.sqrt(np.mean((d - r) ** 2))) / span > SAME_TOL:
            return check_inputs(d, r, raw=prev, step=name)
        prev = r
    return None


def _range_warnings(dep: Runner, trace: Trace) -> list[str]:
    out = []
    for spec in dep.input_specs:
        q = spec.quant
        if q is None:
            for layer in dep.layers.values():
                if layer.op == "quantize" and layer.inputs == (spec.name,) and layer.quant:
                    q = layer.quant
                    break
        if q is None:
            continue
        info = np.iinfo(np.int8) if spec.dtype in ("float32", "int8") else \
            np.iinfo(np.dtype(spec.dtype))
        lo, hi = (info.min - q[1]) * q[0], (info.max - q[1]) * q[0]
        x = np.concatenate([v[spec.name] for v in trace.values])
        span = hi - lo
        if x.min() < lo - 0.05 * span or x.max() > hi + 0.05 * span:
            out.append(f"input {spec.name!r} spans [{x.min():.3g}, {x.max():.3g}] but the "
                       f"model's input quantization covers [{lo:.3g}, {hi:.3g}]; values "
                       f"outside are clipped (check the normalisation)")
    return out


def _scale_divergence(diffs: list[LayerDiff], k: float) -> LayerDiff | None:
    """First int8 layer whose error, in quantization steps, jumps far above its inputs'."""
    for x in diffs:
        if x.rmse_scales is not None and x.rmse_scales > SCALE_ERROR_LIMIT \
                and x.nrmse > k * x.input_nrmse and x.ref_range > 0:
            ideal = x.ref_range / 255.0
            factor = x.deployed_quant[0] / ideal
            if factor < 1 / SCALE_FACTOR_LIMIT or factor > SCALE_FACTOR_LIMIT:
                return x
    return None


def _layer_finding(x: LayerDiff) -> Finding:
    where = f"{x.deployed.split(';')[0]} ({x.source_op})"
    if x.deployed_quant and x.ref_range > 0:
        ideal = x.ref_range / 255.0
        factor = x.deployed_quant[0] / ideal
        if factor < 1 / SCALE_FACTOR_LIMIT or factor > SCALE_FACTOR_LIMIT:
            clip = f"; {x.saturated:.0%} of its values clip" if x.saturated else ""
            return Finding(
                "quantization",
                f"quantization scale of {where} is {x.deployed_quant[0]:.4g} (zero point "
                f"{x.deployed_quant[1]}), {factor:.2g}x what the reference's range "
                f"{x.ref_range:.3g} needs ({ideal:.4g}){clip}; error jumps there to "
                f"{x.rmse_scales:.1f} quantization steps (nRMSE {x.nrmse:.3g}, inputs "
                f"{x.input_nrmse:.3g})", x.deployed)
    return Finding("layer_divergence",
                   f"error jumps at {where}: nRMSE {x.nrmse:.3g} against {x.input_nrmse:.3g} "
                   f"at its inputs (cosine {x.cosine:.4f}, max abs {x.max_abs:.3g})",
                   x.deployed)


def _latency_finding(lat) -> Finding:
    parts = []
    for r in lat.slow:
        base = f"{r.other_ms:.3g} ms on {r.other_backend}" if r.other_backend and r.other_ms \
            else f"{r.predicted_ms:.3g} ms predicted"
        parts.append(f"{r.name} takes {r.measured_ms:.3g} ms on {lat.backend}, "
                     f"{r.ratio:.1f}x {base}")
    hint = " (TFLite reference kernels are for debugging, not deployment)" \
        if lat.backend.startswith("litert-cpu-ref") else ""
    return Finding("slow_kernels", "; ".join(parts) + hint)


def _detail(dep: Runner, x: LayerDiff, alignment) -> dict[str, Any]:
    """Op, attributes and quantization of the divergent block's main op and output."""
    layer = dep.layers[x.deployed]
    block = next((b for b in alignment.deployed_blocks.values() if b.out == x.deployed), None)
    main = dep.layers[block.main] if block else layer
    return {
        "layer": x.deployed, "op": main.op, "source_op": main.source_op,
        "members": list(block.members) if block else [x.deployed],
        "attrs": {k: v for k, v in main.attrs.items() if not isinstance(v, (list, dict))
                  or len(str(v)) < 60},
        "quant": list(layer.quant) if layer.quant else None,
        "input_quant": {i: (list(dep.layers[i].quant) if dep.layers[i].quant else None)
                        for i in main.inputs if i in dep.layers},
        "reference": x.reference, "aligned_by": x.how,
        "nrmse": x.nrmse, "input_nrmse": x.input_nrmse, "cosine": x.cosine,
        "max_abs": x.max_abs, "rmse_scales": x.rmse_scales, "saturated": x.saturated,
    }
