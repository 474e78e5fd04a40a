"""Int8 TFLite front end: the full-int8 model a user already ships, BN folded long ago.

No BatchNorm is left to read FORGE's clean targets from, so they are measured on what
the op will read: each conv's output as the model computes it (its fused activation
included, dequantized) over clean calibration images; beta = its per-channel mean,
|gamma| = its per-channel standard deviation. The conv and its output grid stay as they
are, so source mode is the input model bit for bit. Sites: every CONV_2D and
DEPTHWISE_CONV_2D. The input model is the plain int8 model, byte for byte.
"""

from __future__ import annotations

import dataclasses
import re
import warnings

import numpy as np
from absl import logging

from forge_tflm import model_check
from forge_tflm import tflite_graph as tg
from forge_tflm.converter.sites import BNSite, ConversionError, first_line
from forge_tflm.quiet import native_output_hidden
from forge_tflm.ops.options import DEFAULT_EPS, activation_from_tflite

_KINDS = {"CONV_2D": "conv", "DEPTHWISE_CONV_2D": "depthwise"}
# Calibration inputs whose quantization saturates more often than this were given with
# the wrong input contract (e.g. pixels/255 for a model that takes 0..255).
_MAX_INPUT_SATURATION = 0.01
# ... or use so few input steps that the contract must be too narrow (pixels/255 for a
# model that takes 0..255 uses 2).
_MIN_INPUT_STEPS = 16
# eps = (step / 16)^2 of the conv's output grid: a channel whose clean std is at least a
# step has |gamma| / sqrt(gamma^2 + eps) within 0.2% of 1, so source mode moves none of
# its 256 values (BN's fixed 1e-5 is a large fraction of a post-ReLU variance).
_EPS_STEP_FRACTION = 1 / 16


@dataclasses.dataclass(frozen=True)
class _Conv:
  """One conv of the model, read from the flatbuffer once."""
  index: int
  kind: str
  output: int                # Tensor index.
  weights: np.ndarray        # int8, TFLite layout ([O,H,W,I] or [1,H,W,C*M]).
  output_quant: tuple[float, int]
  activation: str            # The conv's fused activation (a forge_tflm.ops name).


_LAYER_PATTERNS = (re.compile(r"(^|_)bn(_|\d|$)|batch_?norm", re.IGNORECASE),
                   re.compile(r"conv|depthwise", re.IGNORECASE))


def site_name(tensor_name: str, index: int) -> str:
  """A readable name: the layer a TFLite tensor name cites, the folded BN's first (the
  float path's site name), else the conv's, else the operator index.

  Names are ';'-joined op paths "model/layer/.../op"; the outermost matching layer
  wins (Keras 3 puts a "batchnorm" scope inside the BN layer). Keras 3 exports also
  suffix every scope with "_1", the model's included: that suffix is dropped.
  """
  for pattern in _LAYER_PATTERNS:
    for part in tensor_name.split(";"):
      parts = part.split("/")
      for layer in parts[1:-1]:
        if pattern.search(layer):
          if parts[0].endswith("_1") and layer.endswith("_1"):
            layer = layer[:-2]
          return layer
  return f"op{index}"


class TfliteFrontend:
  """A full-int8 .tflite behind the converter's passes."""

  name = "tflite"

  def __init__(self, path: str, data: bytes | None = None):
    """path: the .tflite, or with `data` (a float model's int8 conversion) the model it
    was converted from, for messages."""
    self.path = path
    converted = data is not None
    if data is None:
      with open(path, "rb") as f:
        data = f.read()
    self.data = data
    if self.data[4:8] != tg.FILE_IDENTIFIER:
      raise ConversionError(f"{path!r} is not a TFLite flatbuffer (no TFL3 identifier)")
    # The evaluator's and devices' structural checks, before any interpreter sees it:
    # LiteRT and TFLM trust indices, shapes and scales (a -1 index is a segfault).
    try:
      self.model_t = model_check.check_model(
          self.data, "the converted plain int8 model" if converted else path)
    except model_check.ModelCheckError as e:
      why = ("the evaluator and devices would refuse it" if converted else "convert reads"
             " a full-int8 .tflite: int8 input, output and convs, as TFLite-Micro runs it")
      raise ConversionError(f"{e} ({why})") from e
    self._check_int8()
    self.convs = self._read_convs()

  def _check_int8(self) -> None:
    m = self.model_t
    if len(m.subgraphs) != 1:
      raise ConversionError(f"{self.path}: {len(m.subgraphs)} subgraphs; convert a model"
                            " with one")
    sg = m.subgraphs[0]
    for op in sg.operators:
      if tg.is_custom(m, op):
        what = ("already has FORGE_RECALIB: it is an artifact, not a plain model"
                if tg.op_name(m, op) == tg.FORGE_RECALIB else
                f"has the custom op {tg.op_name(m, op)!r}")
        raise ConversionError(f"{self.path} {what}")
    for role, ids in (("input", sg.inputs), ("output", sg.outputs)):
      if len(ids) != 1:
        raise ConversionError(f"{self.path}: {len(ids)} {role}s; one is supported")
      t = sg.tensors[ids[0]]
      if t.type != tg.schema.TensorType.INT8:
        raise ConversionError(
            f"{self.path}: the {role} is {tg.numpy_dtype(t).__name__}, not int8: convert"
            " from a full-int8 model (int8 input and output)")

  def _read_convs(self) -> list[_Conv]:
    m = self.model_t
    sg = m.subgraphs[0]
    convs = []
    for i, op in enumerate(sg.operators):
      kind = _KINDS.get(tg.op_name(m, op))
      if kind is None:
        continue
      x, w = sg.tensors[op.inputs[0]], sg.tensors[op.inputs[1]]
      weights = tg.buffer_array(m, w)
      if weights is None or weights.dtype != np.int8 or x.type != tg.schema.TensorType.INT8:
        raise ConversionError(f"{self.path}: {tg.op_name(m, op)} op {i} is not int8 with"
                              " constant int8 weights: not a full-int8 model")
      act = activation_from_tflite(op.builtinOptions.fusedActivationFunction)
      if act is None:
        raise ConversionError(f"{self.path}: op {i} has unsupported fused activation code"
                              f" {op.builtinOptions.fusedActivationFunction}")
      quant = tg.per_tensor_quant(sg.tensors[op.outputs[0]])
      if quant[0] * _EPS_STEP_FRACTION > 1:  # eps = (step / 16)^2 must stay <= 1.
        raise ConversionError(f"{self.path}: {tg.op_name(m, op)} op {i}: output scale"
                              f" {quant[0]:.6g} is above {1 / _EPS_STEP_FRACTION:g}, coarser"
                              " than FORGE's variance floor takes: not a trained int8 model")
      convs.append(_Conv(index=i, kind=kind, output=int(op.outputs[0]), weights=weights,
                         output_quant=quant, activation=act.name))
    return convs

  @property
  def input_shape(self) -> tuple[int, ...]:
    sg = self.model_t.subgraphs[0]
    return tuple(int(d) for d in sg.tensors[sg.inputs[0]].shape[1:])

  def find_sites(self) -> list[BNSite]:
    """Every conv, with no targets yet (`measure_targets` fills them)."""
    if not self.convs:
      raise ConversionError(f"{self.path}: no CONV_2D or DEPTHWISE_CONV_2D operators")
    sg = self.model_t.subgraphs[0]
    sites, used = [], set()
    for c in self.convs:
      out = sg.tensors[c.output]
      name = site_name(tg.tensor_name(out), c.index)
      if name in used:
        name = f"{name}@op{c.index}"
      used.add(name)
      nan = np.full(int(out.shape[-1]), np.nan, np.float32)
      sites.append(BNSite(name=name, conv=tg.tensor_name(out), kind=c.kind,
                          activation=c.activation, beta=nan, gamma_abs=nan, eps=DEFAULT_EPS,
                          folded_kernel=c.weights))
    return sites

  def op_index(self, sites: list[BNSite]) -> dict[str, int]:
    by_output = {tg.tensor_name(self.model_t.subgraphs[0].tensors[c.output]): c.index
                 for c in self.convs}
    return {s.name: by_output[s.conv] for s in sites}

  def quantize_input(self, x_float: np.ndarray) -> np.ndarray:
    """Calibration floats -> the model's int8 input; refuses a contract that saturates."""
    sg = self.model_t.subgraphs[0]
    scale, zp = tg.per_tensor_quant(sg.tensors[sg.inputs[0]])
    q = np.round(x_float / scale) + zp
    saturated = float(np.mean((q < -128) | (q > 127)))
    if saturated > _MAX_INPUT_SATURATION:
      low, high = scale * (-128 - zp), scale * (127 - zp)
      raise ConversionError(
          f"{100 * saturated:.1f}% of the calibration inputs fall outside the model's"
          f" input quantization [{low:.4g}, {high:.4g}]: give the input contract the model"
          " was trained with (--input_range or --input_mean/--input_std)")
    q = np.clip(q, -128, 127)
    if q.size and q.max() - q.min() < _MIN_INPUT_STEPS:
      raise ConversionError(
          f"the calibration inputs use only {int(q.max() - q.min()) + 1} of the model's 256"
          " input steps: give the input contract the model was trained with"
          " (--input_range or --input_mean/--input_std)")
    return q.astype(np.int8)

  def measure_targets(self, sites: list[BNSite], x_float: np.ndarray,
                      index: dict[str, int] | None = None) -> list[BNSite]:
    """Sites with beta, |gamma| = the per-channel mean and std of their conv's output
    (dequantized, as the model computes it) over `x_float`; index: site -> conv op
    (default: the sites this front end found)."""
    index = index if index is not None else self.op_index(sites)
    convs = {c.index: c for c in self.convs}
    picked = [convs[index[s.name]] for s in sites]
    x_int8 = self.quantize_input(x_float)
    try:
      moments = _output_moments(self.data, picked, x_int8)
    except (ValueError, RuntimeError) as e:  # What the model check cannot see.
      raise ConversionError(f"{self.path}: LiteRT cannot run it: {first_line(e)}") from e
    constant = sum(int(np.sum(std == 0)) for _, std in moments)
    if constant:
      # |gamma| = 0 holds such a channel at its clean value, in source mode too.
      logging.warning("%d channels are constant on the %d calibration images; FORGE holds"
                      " them at that value (give more images if they vary on your data)",
                      constant, len(x_float))
    return [dataclasses.replace(s, beta=mean.astype(np.float32),
                                gamma_abs=std.astype(np.float32),
                                eps=float((c.output_quant[0] * _EPS_STEP_FRACTION) ** 2))
            for s, c, (mean, std) in zip(sites, picked, moments)]


def _output_moments(model: bytes, convs: list[_Conv], x_int8: np.ndarray
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
  """(mean, std) per channel of each conv's dequantized output over the int8 inputs."""
  from ai_edge_litert.interpreter import Interpreter

  with native_output_hidden(), warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # "preserve_all_tensors is for debugging"
    it = Interpreter(model_content=model, experimental_preserve_all_tensors=True)
    it.allocate_tensors()
  input_index = it.get_input_details()[0]["index"]
  sums = [[0.0, 0.0, 0] for _ in convs]
  for image in x_int8:
    it.set_tensor(input_index, image[None])
    it.invoke()
    for c, acc in zip(convs, sums):
      q = it.get_tensor(c.output)
      scale, zp = c.output_quant
      real = (q.reshape(-1, q.shape[-1]).astype(np.float64) - zp) * scale
      acc[0] = acc[0] + real.sum(0)
      acc[1] = acc[1] + np.square(real).sum(0)
      acc[2] += real.shape[0]
  out = []
  for total, squares, count in sums:
    mean = total / count
    out.append((mean, np.sqrt(np.maximum(squares / count - np.square(mean), 0.0))))
  return out
