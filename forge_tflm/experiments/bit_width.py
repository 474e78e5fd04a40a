"""`bit-width` (the paper's Table 7): FORGE at weight/activation widths 8/8, 6/6, 4/8, 4/4.

TFLite has no sub-8-bit kernels, so narrower integers are simulated on the int8
artifact, keeping its int8 kernels and storage:

  weights (b bits)      every conv, depthwise conv and fully connected layer's int8
                        weights are re-quantized per output channel to b-bit symmetric
                        integers over the same range (scale * 127 / (2^(b-1) - 1)), stored
                        in int8 with the new scale; biases keep their real value on the new
                        bias scale. That is b-bit per-channel quantization of the weights
                        (of their int8 values: the float ones are not in the artifact).
  activations (b bits)  after every operator (and on the model input) each int8 tensor
                        is rounded onto the b-bit grid of its own range: the points
                        zero_point + k * 2^(8-b) inside [-128, 127], 2^b of them. A host
                        op does it between LiteRT segments; the FORGE op sees and writes
                        b-bit values. The one difference from a b-bit kernel: its output is
                        rounded twice (to int8, then to the b-bit grid).

Each width pair: source and FORGE (the op, the artifact's options) on the 15
corruptions at severity 5, test split, batch 64, one shuffled ordering.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from forge_tflm.experiments.common import (ExperimentContext, Outcome, bundled_artifact,
                                           grouped_bars)

WIDTHS = ((8, 8), (6, 6), (4, 8), (4, 4))
IMAGES = 2000
FAKE_QUANT = "FORGE_SIM_FAKE_QUANT"
_WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def lower_weight_bits(model_bytes: bytes, bits: int) -> bytes:
  """The model with every weighted layer's weights on a `bits`-bit grid (see module)."""
  from forge_tflm import tflite_graph as tg  # pylint: disable=import-outside-toplevel

  if bits == 8:
    return model_bytes
  model = tg.load_model(model_bytes)
  sg = model.subgraphs[0]
  top = 2 ** (bits - 1) - 1
  for op in sg.operators:
    if tg.op_name(model, op) not in _WEIGHTED:
      continue
    w_t = sg.tensors[op.inputs[1]]
    q = tg.buffer_array(model, w_t).astype(np.float64)
    scale = np.asarray(w_t.quantization.scale, np.float64)
    axis = int(w_t.quantization.quantizedDimension or 0) if len(scale) > 1 else None
    new_scale = scale * 127.0 / top
    shape = [1] * q.ndim
    if axis is not None:
      shape[axis] = -1
    ratio = (scale / new_scale).reshape(shape)
    q_new = np.clip(np.round(q * ratio), -top, top).astype(np.int8)
    w_t.buffer = tg.add_const_buffer(model, q_new)
    w_t.quantization.scale = [float(v) for v in new_scale]
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
      b_t = sg.tensors[op.inputs[2]]
      bias = tg.buffer_array(model, b_t).astype(np.float64)
      b_scale = np.asarray(b_t.quantization.scale, np.float64)
      new_b_scale = b_scale * (new_scale / scale)
      b_t.buffer = tg.add_const_buffer(
          model, np.round(bias * b_scale / new_b_scale).astype(np.int32))
      b_t.quantization.scale = [float(v) for v in new_b_scale]
  return tg.save_model(model)


def grid(x: np.ndarray, zero_point: int, bits: int) -> np.ndarray:
  """int8 values rounded to the `bits`-bit grid zero_point + k * 2^(8-bits) in int8."""
  if bits == 8:
    return x
  step = 2 ** (8 - bits)
  lo = zero_point - step * ((zero_point + 128) // step)
  hi = zero_point + step * ((127 - zero_point) // step)
  y = zero_point + step * np.round((x.astype(np.int32) - zero_point) / step)
  return np.clip(y, lo, hi).astype(np.int8)


def fake_quant_activations(model_bytes: bytes, bits: int):
  """(model with a FAKE_QUANT host op after every int8 tensor's producer and on the
  input, host_kernels for SegmentedModel)."""
  from ai_edge_litert import schema_py_generated as schema  # pylint: disable=import-outside-toplevel

  from forge_tflm import tflite_graph as tg  # pylint: disable=import-outside-toplevel

  if bits == 8:
    return model_bytes, {}
  model = tg.load_model(model_bytes)
  sg = model.subgraphs[0]
  code = tg.custom_opcode_index(model, FAKE_QUANT)

  def detour(t: int) -> tuple[int, "schema.OperatorT"]:
    src = sg.tensors[t]
    pre = schema.TensorT()
    pre.shape, pre.shapeSignature, pre.type = src.shape, src.shapeSignature, src.type
    pre.quantization, pre.buffer = src.quantization, 0
    pre.name = tg.tensor_name(src) + "/before_fake_quant"
    sg.tensors.append(pre)
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = code, [len(sg.tensors) - 1], [t]
    return len(sg.tensors) - 1, op

  ops = []
  int8 = schema.TensorType.INT8
  for t in list(sg.inputs):
    if sg.tensors[t].type == int8:
      pre, fq = detour(int(t))
      sg.inputs = [pre if int(i) == int(t) else int(i) for i in sg.inputs]
      ops.append(fq)
  for op in sg.operators:
    ops.append(op)
    out = int(op.outputs[0])
    if sg.tensors[out].type == int8 and tg.op_name(model, op) != FAKE_QUANT:
      pre, fq = detour(out)
      op.outputs[0] = pre
      ops.append(fq)
  sg.operators = ops
  zero = {i: int(tensor.quantization.zeroPoint[0]) for i, tensor in enumerate(sg.tensors)
          if tensor.type == int8 and tensor.quantization is not None
          and tensor.quantization.zeroPoint is not None
          and len(tensor.quantization.zeroPoint) == 1}

  def kernel(x, op):
    return grid(x, zero[int(op.outputs[0])], bits)

  return tg.save_model(model), {FAKE_QUANT: kernel}


@dataclasses.dataclass(frozen=True)
class WidthUnit:
  artifact: str
  weights: int
  activations: int
  method: str  # "source" or "forge"
  stream: object  # selection.StreamSpec
  batch_size: int = 64


@functools.lru_cache(maxsize=2)
def _model(path: str, weights: int, activations: int):
  from forge_tflm.artifact import Artifact  # pylint: disable=import-outside-toplevel
  from forge_tflm.runtime.segmented import SegmentedModel  # pylint: disable=import-outside-toplevel

  artifact = Artifact.load(path, require_manifest=True)
  data, host = fake_quant_activations(lower_weight_bits(artifact.model, weights),
                                      activations)
  return artifact, SegmentedModel(data, "optimized", host_kernels=host,
                                  site_names=artifact.site_names,
                                  source=f"{path} at W{weights}/A{activations}")


def unit_accuracy(unit: WidthUnit) -> float:
  from forge_tflm.evaluation.selection import stream_accuracy, stream_inputs  # pylint: disable=import-outside-toplevel

  _, model = _model(unit.artifact, unit.weights, unit.activations)
  x, labels = stream_inputs(unit.artifact, unit.stream)
  return stream_accuracy(model, x, labels, "adapt" if unit.method == "forge" else "source",
                         unit.batch_size)


def run(ctx: ExperimentContext) -> Outcome:
  from forge_tflm.corruptions import CORRUPTIONS  # pylint: disable=import-outside-toplevel
  from forge_tflm.evaluation.selection import StreamSpec, prepare  # pylint: disable=import-outside-toplevel
  from forge_tflm.sweep import run_units  # pylint: disable=import-outside-toplevel

  artifact = bundled_artifact(ctx)
  streams = [StreamSpec(c, ctx.data_dir, split="test", images=ctx.images or IMAGES)
             for c in CORRUPTIONS]
  prepare(streams)
  units = [WidthUnit(artifact, w, a, m, s) for w, a in WIDTHS for m in ("source", "forge")
           for s in streams]
  acc = iter(run_units(ctx.executor, unit_accuracy, units, "bit-width units",
                       ctx.progress))
  rows = {}
  for w, a in WIDTHS:
    per = {m: {s.corruption: 100 * next(acc) for s in streams} for m in ("source", "forge")}
    src, forge = (float(np.mean(list(per[m].values()))) for m in ("source", "forge"))
    hurt = sum(per["forge"][c] < per["source"][c] for c in CORRUPTIONS)
    rows[f"W{w}/A{a}"] = {"source": src, "forge": forge, "recovery": forge - src,
                          "hurt": hurt, "per_corruption": per}
  lines = ["# bit-width: FORGE at narrower integers (paper Table 7)", "",
           f"ResNet-20 (bundled), 15 corruptions at severity 5, {streams[0].images} test"
           " images each, batch 64, one shuffled ordering. Widths below 8 bits are"
           " simulated on the int8 artifact (forge_tflm/experiments/bit_width.py): b-bit"
           " per-channel weights, activations rounded to the b-bit grid of each tensor's"
           " range after every operator; no retraining or re-calibration.", "",
           "| weights / activations | int8 source | FORGE | recovery (points) |"
           " corruptions hurt |", "| --- | ---: | ---: | ---: | ---: |"]
  for name, r in rows.items():
    lines.append(f"| {name} | {r['source']:.2f} | {r['forge']:.2f} | {r['recovery']:+.2f} |"
                 f" {r['hurt']}/15 |")
  lines += ["", "The paper's Table 7 values are not available in this checkout."]
  groups = {name: {"int8 source": r["source"], "FORGE": r["forge"]}
            for name, r in rows.items()}
  return Outcome({"rows": rows, "images_per_stream": streams[0].images}, "\n".join(lines),
                 lambda p: grouped_bars(p, groups, "mean accuracy (%)",
                                        "weights / activations bits", size=(6, 3.4)),
                 (artifact,))
