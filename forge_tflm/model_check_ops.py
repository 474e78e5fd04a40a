"""The builtin operators' rules: options, operand types, the output shape the op
computes and the quantization limits LiteRT's, TFLM's and XNNPACK's kernels assert.

Part of forge_tflm.model_check (see its docstring for the order of the checks): its
graph check calls `check_builtin` for each builtin operator.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from forge_tflm import tflite_graph as tg
from forge_tflm.model_check_base import T, TYPE_NAMES, fmt_shape, scale_count, scale_zero

# Strides, dilations, pool windows and paddings (LiteRT keeps them in int16).
MAX_WINDOW = (1 << 15) - 1
# Requantization multipliers s_x * s_w / s_y of convolutions and fully connected
# layers: XNNPACK (LiteRT's optimized kernels) refuses >= 256.
MAX_CONV_MULTIPLIER = 256.0
# Operator versions the pinned LiteRT (ai-edge-litert 2.3.0) resolves in both kernel
# modes (BUILTIN_REF for "reference", the builtin resolver for "optimized"); measured
# by building a one-op model per version. TFLM ignores versions.
MAX_OP_VERSION = {
    "ADD": 5, "AVERAGE_POOL_2D": 3, "CONCATENATION": 7, "CONV_2D": 8,
    "DEPTHWISE_CONV_2D": 6, "FULLY_CONNECTED": 14, "MAX_POOL_2D": 3, "MEAN": 3,
    "MUL": 7, "PAD": 6, "RELU": 3, "RELU6": 3, "RESHAPE": 1, "SOFTMAX": 3, "SUB": 5,
}

O = schema.BuiltinOptions
_ACT = schema.ActivationFunctionType
_INT8_ACTIVATIONS = (_ACT.NONE, _ACT.RELU, _ACT.RELU6, _ACT.RELU_N1_TO_1)


@dataclasses.dataclass
class _Operand:
  """One tensor as an operator sees it."""
  index: int
  tensor: "schema.TensorT"
  shape: tuple
  const: np.ndarray | None  # Constant data, or None.


class _OpView:
  """One operator under check: operand access with messages that name it.

  `checker` is model_check's graph check: its model, subgraph, checked shapes and
  messages."""

  def __init__(self, checker, i, op, name, op_inputs, op_outputs):
    self.c, self.i, self.op, self.name = checker, i, op, name
    self.ins, self.outs = op_inputs, op_outputs

  def fail(self, msg: str):
    self.c.fail(msg)

  def arity(self, low: int, high: int, outputs: int = 1) -> None:
    if not low <= len(self.ins) <= high:
      want = str(low) if low == high else f"{low} to {high}"
      self.fail(f"has {len(self.ins)} inputs, {self.name} takes {want}")
    if len(self.outs) != outputs:
      self.fail(f"has {len(self.outs)} outputs, {self.name} has {outputs}")

  def label(self, kind: str, k: int) -> str:
    t = (self.ins if kind == "input" else self.outs)[k]
    return f"{kind} {k} ({self.c.tensor_label(t)})"

  def _operand(self, kind, k, types, rank, const, per_channel=False) -> _Operand | None:
    ids = self.ins if kind == "input" else self.outs
    t = ids[k] if k < len(ids) else -1
    if t < 0:
      if const == "optional":
        return None
      self.fail(f"{kind} {k} is missing (-1): {self.name} needs it")
    tensor = self.c.sg.tensors[t]
    label = self.label(kind, k)
    if tensor.type not in types:
      want = " or ".join(TYPE_NAMES[x] for x in types)
      self.fail(f"{label} is {TYPE_NAMES.get(tensor.type, tensor.type)}, {self.name}"
                f" needs {want}")
    shape = self.c.shapes[t]
    if rank is not None:
      ranks = rank if isinstance(rank, tuple) else (rank,)
      if len(shape) not in ranks:
        self.fail(f"{label} has rank {len(shape)} (shape {fmt_shape(shape)}),"
                  f" {self.name} needs {' or '.join(map(str, ranks))}")
    data = None
    if self.c.is_const(t):
      data = tg.buffer_array(self.c.model, tensor)
    if const in (True, "optional") and data is None:
      self.fail(f"{label} must be a constant")
    if tensor.type == T.INT8 and scale_count(tensor) == 0:
      self.fail(f"{label} is int8 without quantization parameters")
    if scale_count(tensor) > 1 and not per_channel:
      self.fail(f"{label} is per-channel quantized: {self.name} needs it per-tensor")
    return _Operand(t, tensor, shape, data)

  def input(self, k, types=(T.INT8,), rank=None, const=False,
            per_channel=False) -> _Operand | None:
    return self._operand("input", k, types, rank, const, per_channel)

  def output(self, k=0, types=(T.INT8,), rank=None) -> _Operand:
    return self._operand("output", k, types, rank, False)

  def options(self, kind, required: bool = True):
    op = self.op
    if op.builtinOptionsType == O.NONE and not required:
      return None
    if op.builtinOptionsType != kind or op.builtinOptions is None:
      names = {v: k for k, v in vars(O).items() if not k.startswith("_")}
      self.fail(f"builtin options are {names.get(op.builtinOptionsType, '?')},"
                f" {self.name} needs {names[kind]}")
    return op.builtinOptions

  def activation(self, code) -> None:
    if code not in _INT8_ACTIVATIONS:
      self.fail(f"fused activation {code} is not supported for int8")

  def expect_shape(self, out: _Operand, shape, why: str = "") -> None:
    shape = tuple(int(d) for d in shape)
    if any(d < 1 for d in shape):
      self.fail(f"computes an empty output {fmt_shape(shape)}{why}")
    if tuple(out.shape) != shape:
      self.fail(f"{self.label('output', 0)} has shape {fmt_shape(out.shape)}, the op"
                f" computes {fmt_shape(shape)} from its inputs{why}")

  def same_quant(self, a: _Operand, b: _Operand) -> None:
    if scale_zero(a.tensor) != scale_zero(b.tensor):
      self.fail(f"input and output quantization differ ({scale_zero(a.tensor)} vs"
                f" {scale_zero(b.tensor)}): {self.name} requires the same scale and zero point")

  def weights_quant(self, w: _Operand, axis: int, channels: int, label: str) -> None:
    q = w.tensor.quantization
    n = scale_count(w.tensor)
    if n not in (1, channels) or (n > 1 and int(q.quantizedDimension) != axis):
      self.fail(f"{label} ({self.c.tensor_label(w.index)}) must be quantized per tensor"
                f" or per channel along dimension {axis} ({channels} scales), has {n}")
    if any(int(z) != 0 for z in np.asarray(q.zeroPoint).ravel()):
      self.fail(f"{label} ({self.c.tensor_label(w.index)}) has a non-zero zero point"
                " (int8 weights are symmetric)")

  def bias(self, k: int, channels: int, optional: bool = True) -> None:
    if not optional and (len(self.ins) <= k or self.ins[k] == -1):
      self.fail(f"has no bias (input {k}): LiteRT's int8 {self.name} needs one")
    b = self.input(k, (T.INT32,), 1, "optional", per_channel=True)
    if b is not None and b.shape != (channels,):
      self.fail(f"{self.label('input', k)} has shape {fmt_shape(b.shape)}, not"
                f" [{channels}]")

  def multipliers(self, x: _Operand, w: _Operand, y: _Operand) -> None:
    """The per-channel requantization multipliers s_x * s_w[c] / s_y."""
    s_x, s_y = scale_zero(x.tensor)[0], scale_zero(y.tensor)[0]
    for c, s_w in enumerate(np.asarray(w.tensor.quantization.scale, np.float64).ravel()):
      mult = s_x * float(np.float32(s_w)) / s_y
      if _quantize_multiplier_exp(mult) is None or mult >= MAX_CONV_MULTIPLIER:
        self.fail(f"the requantization multiplier s_x * s_w / s_y of channel {c} is"
                  f" {mult:.7g} (input 1 {self.c.tensor_label(w.index)} scale"
                  f" {float(np.float32(s_w)):.7g}): it must be finite and <"
                  f" {MAX_CONV_MULTIPLIER:g}")

  def window(self, value, what: str) -> int:
    if not 1 <= int(value) <= MAX_WINDOW:
      self.fail(f"{what} {value} is not in [1, {MAX_WINDOW}]")
    return int(value)

  def padding(self, value) -> int:
    if value not in (schema.Padding.SAME, schema.Padding.VALID):
      self.fail(f"padding {value} is neither SAME nor VALID")
    return value


def _out_size(size: int, window: int, stride: int, dilation: int, padding: int) -> int:
  """TFLite's ComputeOutSize (C division truncates toward zero)."""
  effective = (window - 1) * dilation + 1
  if padding == schema.Padding.SAME:
    return (size + stride - 1) // stride
  return int((size + stride - effective) / stride)


def _quantize_multiplier_exp(multiplier: float) -> int | None:
  """The shift of TFLite's QuantizeMultiplier(double) (significand rounded to Q31),
  or None where it would not be finite."""
  if not math.isfinite(multiplier) or multiplier <= 0:
    return None
  q, shift = math.frexp(multiplier)
  if round(q * (1 << 31)) == (1 << 31):
    shift += 1
  return shift


# -- builtin rules ----------------------------------------------------------------------


def _conv(v: _OpView) -> None:
  v.arity(2, 3)
  x = v.input(0, rank=4)
  w = v.input(1, rank=4, const=True, per_channel=True)
  y = v.output(0, rank=4)
  o = v.options(O.Conv2DOptions)
  padding = v.padding(o.padding)
  sh, sw = v.window(o.strideH, "stride"), v.window(o.strideW, "stride")
  dh, dw = v.window(o.dilationHFactor, "dilation"), v.window(o.dilationWFactor, "dilation")
  v.activation(o.fusedActivationFunction)
  n, h, wd, cin = x.shape
  cout, kh, kw, wc = w.shape
  if wc != cin:
    v.fail(f"{v.label('input', 1)} has {wc} input channels, the input has {cin}"
           " (grouped convolutions are not supported)")
  if o.quantizedBiasType:
    v.fail(f"quantized bias type {o.quantizedBiasType} is not supported")
  v.weights_quant(w, 0, cout, "input 1")
  v.bias(2, cout, optional=False)
  v.expect_shape(y, (n, _out_size(h, kh, sh, dh, padding),
                     _out_size(wd, kw, sw, dw, padding), cout))
  v.multipliers(x, w, y)


def _depthwise(v: _OpView) -> None:
  v.arity(2, 3)
  x = v.input(0, rank=4)
  w = v.input(1, rank=4, const=True, per_channel=True)
  y = v.output(0, rank=4)
  o = v.options(O.DepthwiseConv2DOptions)
  padding = v.padding(o.padding)
  sh, sw = v.window(o.strideH, "stride"), v.window(o.strideW, "stride")
  dh, dw = v.window(o.dilationHFactor, "dilation"), v.window(o.dilationWFactor, "dilation")
  v.activation(o.fusedActivationFunction)
  n, h, wd, cin = x.shape
  one, kh, kw, cout = w.shape
  if one != 1 or cout % cin or o.depthMultiplier != cout // cin:
    v.fail(f"{v.label('input', 1)} has shape {fmt_shape(w.shape)}: a depthwise filter"
           f" is [1, H, W, {cin} x depth_multiplier] (depth_multiplier"
           f" {o.depthMultiplier})")
  v.weights_quant(w, 3, cout, "input 1")
  v.bias(2, cout, optional=False)
  v.expect_shape(y, (n, _out_size(h, kh, sh, dh, padding),
                     _out_size(wd, kw, sw, dw, padding), cout))
  v.multipliers(x, w, y)


def _fully_connected(v: _OpView) -> None:
  v.arity(2, 3)
  x = v.input(0)
  w = v.input(1, rank=2, const=True, per_channel=True)
  y = v.output(0)
  o = v.options(O.FullyConnectedOptions)
  v.activation(o.fusedActivationFunction)
  if o.weightsFormat != schema.FullyConnectedOptionsWeightsFormat.DEFAULT:
    v.fail(f"weights format {o.weightsFormat} is not supported")
  if o.quantizedBiasType or o.asymmetricQuantizeInputs or o.quantSpec is not None:
    v.fail("hybrid / block quantization options are not supported")
  cout, depth = w.shape
  elements = int(np.prod(x.shape, dtype=np.int64))
  if not x.shape or x.shape[-1] != depth and o.keepNumDims or elements % depth:
    v.fail(f"{v.label('input', 0)} of shape {fmt_shape(x.shape)} does not split into"
           f" rows of {depth} (the weights' depth)")
  v.weights_quant(w, 0, cout, "input 1")
  v.bias(2, cout)
  out = x.shape[:-1] + (cout,) if o.keepNumDims else (elements // depth, cout)
  v.expect_shape(y, out)
  v.multipliers(x, w, y)


def _broadcast(v: _OpView, a: tuple, b: tuple) -> tuple:
  rank = max(len(a), len(b))
  a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
  out = []
  for da, db in zip(a, b):
    if da != db and 1 not in (da, db):
      v.fail(f"input shapes {fmt_shape(a)} and {fmt_shape(b)} do not broadcast")
    out.append(max(da, db))
  return tuple(out)


def _add_sub(v: _OpView) -> None:
  v.arity(2, 2)
  a, b = v.input(0), v.input(1)
  y = v.output(0)
  kind = O.AddOptions if v.name == "ADD" else O.SubOptions
  o = v.options(kind, required=False)
  if o is not None:
    v.activation(o.fusedActivationFunction)
  if len(a.shape) > 6 or len(b.shape) > 6:
    v.fail("inputs of rank > 6")
  v.expect_shape(y, _broadcast(v, a.shape, b.shape))
  # LiteRT / TFLM int8 ADD and SUB: inputs rescaled by 2^20, then
  # QuantizeMultiplierSmallerThanOneExp(2 * max(s_a, s_b) / (2^20 * s_y)) asserts
  # (aborts) unless that multiplier is < 1 after rounding.
  s_a, s_b, s_y = scale_zero(a.tensor)[0], scale_zero(b.tensor)[0], scale_zero(y.tensor)[0]
  twice_max = 2 * max(s_a, s_b)
  out_mult = twice_max / ((1 << 20) * s_y)
  shift = _quantize_multiplier_exp(out_mult)
  if shift is None or out_mult >= 1 or shift > 0:
    v.fail(f"{v.label('output', 0)} scale {s_y:.7g} is too small for input scales"
           f" {s_a:.7g} and {s_b:.7g} (int8 {v.name} needs 2 * max(s_a, s_b) / s_y"
           " < 2^20)")
  for s in (s_a, s_b):
    if _quantize_multiplier_exp(s / twice_max) is None:
      v.fail("input multiplier is not finite")


def _mul(v: _OpView) -> None:
  v.arity(2, 2)
  a, b = v.input(0), v.input(1)
  y = v.output(0)
  o = v.options(O.MulOptions, required=False)
  if o is not None:
    v.activation(o.fusedActivationFunction)
  v.expect_shape(y, _broadcast(v, a.shape, b.shape))
  mult = scale_zero(a.tensor)[0] * scale_zero(b.tensor)[0] / scale_zero(y.tensor)[0]
  if _quantize_multiplier_exp(mult) is None:
    v.fail("the requantization multiplier s_a * s_b / s_y is not finite")


def _pool(v: _OpView) -> None:
  v.arity(1, 1)
  x = v.input(0, rank=4)
  y = v.output(0, rank=4)
  o = v.options(O.Pool2DOptions)
  padding = v.padding(o.padding)
  sh, sw = v.window(o.strideH, "stride"), v.window(o.strideW, "stride")
  fh, fw = v.window(o.filterHeight, "filter"), v.window(o.filterWidth, "filter")
  v.activation(o.fusedActivationFunction)
  n, h, w, c = x.shape
  v.expect_shape(y, (n, _out_size(h, fh, sh, 1, padding),
                     _out_size(w, fw, sw, 1, padding), c))
  v.same_quant(x, y)


def _mean(v: _OpView) -> None:
  v.arity(2, 2)
  x = v.input(0, rank=(1, 2, 3, 4, 5))
  axes = v.input(1, (T.INT32,), (0, 1), const=True)
  y = v.output(0)
  o = v.options(O.ReducerOptions, required=False)
  keep = bool(o.keepDims) if o is not None else False
  rank = len(x.shape)
  resolved = set()
  for a in np.asarray(axes.const).ravel():
    a = int(a)
    if not -rank <= a < rank:
      v.fail(f"{v.label('input', 1)}: axis {a} is outside a rank-{rank} input")
    resolved.add(a % rank)
  if keep:
    out = tuple(1 if i in resolved else d for i, d in enumerate(x.shape))
  else:
    out = tuple(d for i, d in enumerate(x.shape) if i not in resolved)
  if not out and not keep:
    out = ()
  if tuple(y.shape) != out:
    v.expect_shape(y, out)
  mult = scale_zero(x.tensor)[0] / scale_zero(y.tensor)[0]
  if _quantize_multiplier_exp(mult) is None:
    v.fail("the requantization multiplier s_x / s_y is not finite")


def _reshape(v: _OpView) -> None:
  v.arity(1, 2)
  x = v.input(0)
  y = v.output(0)
  shape_in = v.input(1, (T.INT32,), 1, "optional") if len(v.ins) > 1 else None
  o = v.options(O.ReshapeOptions, required=False)
  elements = int(np.prod(x.shape, dtype=np.int64))

  def resolve(target, what):
    if target.count(-1) > 1 or any(d < 1 and d != -1 for d in target) or len(target) > 6:
      v.fail(f"{what} {fmt_shape(target)} is not valid")
    known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
    if -1 in target:
      if known == 0 or elements % known:
        v.fail(f"{what} {fmt_shape(target)} does not fit {elements} elements")
      return [elements // known if d == -1 else d for d in target]
    if known != elements:
      v.fail(f"{what} {fmt_shape(target)} does not hold the input's {elements}"
             " elements")
    return target

  targets = []
  if shape_in is not None:
    targets.append(resolve([int(d) for d in np.asarray(shape_in.const).ravel()],
                           "target shape"))
  if o is not None and o.newShape is not None and len(o.newShape):
    # LiteRT parses new_shape (at most 8 entries) even when the shape input is there.
    targets.append(resolve([int(d) for d in np.asarray(o.newShape).ravel()],
                           "new_shape option"))
  if not targets:
    v.fail("no target shape (neither a shape input nor new_shape)")
  if len(targets) == 2 and targets[0] != targets[1]:
    v.fail(f"the shape input {fmt_shape(targets[0])} and the new_shape option"
           f" {fmt_shape(targets[1])} disagree")
  v.expect_shape(y, targets[0])
  v.same_quant(x, y)


def _softmax(v: _OpView) -> None:
  v.arity(1, 1)
  x = v.input(0, rank=(1, 2, 3, 4))
  y = v.output(0)
  o = v.options(O.SoftmaxOptions)
  v.expect_shape(y, x.shape)
  s_x = scale_zero(x.tensor)[0]
  s_y, z_y = scale_zero(y.tensor)
  if abs(s_y - 1 / 256) > (1 / 256) * 1e-3 or z_y != -128:
    v.fail(f"{v.label('output', 0)} must have scale 1/256 and zero point -128 (int8"
           f" softmax), has {s_y:.7g} and {z_y}")
  beta = float(np.float32(o.beta))
  # TFLite's PreprocessSoftmaxScaling: QuantizeMultiplierGreaterThanOne(
  # min(beta * s_x * 2^26, 2^31 - 1)) asserts a multiplier > 1.
  if not (math.isfinite(beta) and beta > 0):
    v.fail(f"beta {beta:.7g} must be finite and > 0")
  if not beta * s_x * (1 << 26) > 1.0:
    v.fail(f"beta * input scale = {beta * s_x:.7g} is below 2^-26 (int8 softmax"
           " cannot represent it)")


def _pad(v: _OpView) -> None:
  v.arity(2, 2)
  x = v.input(0, rank=(1, 2, 3, 4, 5))  # LiteRT's PadKernelMaxDimensionCount.
  pads = v.input(1, (T.INT32,), 2, const=True)
  y = v.output(0)
  v.options(O.PadOptions, required=False)
  rank = len(x.shape)
  if pads.shape != (rank, 2):
    v.fail(f"{v.label('input', 1)} has shape {fmt_shape(pads.shape)}, not [{rank},2]")
  p = np.asarray(pads.const, np.int64).reshape(rank, 2)
  if np.any(p < 0) or np.any(p > MAX_WINDOW):
    v.fail(f"{v.label('input', 1)}: paddings must be in [0, {MAX_WINDOW}]")
  v.expect_shape(y, tuple(d + int(a) + int(b) for d, (a, b) in zip(x.shape, p)))
  v.same_quant(x, y)


def _concatenation(v: _OpView) -> None:
  v.arity(1, 64)
  xs = [v.input(k) for k in range(len(v.ins))]
  y = v.output(0)
  o = v.options(O.ConcatenationOptions)
  if o.fusedActivationFunction != _ACT.NONE:  # LiteRT's int8 kernel refuses them.
    v.fail(f"fused activation {o.fusedActivationFunction}: int8 CONCATENATION takes"
           " none")
  rank = len(xs[0].shape)
  axis = int(o.axis)
  if not -rank <= axis < rank:
    v.fail(f"axis {axis} is outside rank {rank}")
  axis %= rank
  for k, x in enumerate(xs):
    if len(x.shape) != rank or any(d != e for j, (d, e) in enumerate(
        zip(x.shape, xs[0].shape)) if j != axis):
      v.fail(f"{v.label('input', k)} shape {fmt_shape(x.shape)} does not concatenate"
             f" with {fmt_shape(xs[0].shape)} along axis {axis}")
  out = list(xs[0].shape)
  out[axis] = sum(x.shape[axis] for x in xs)
  v.expect_shape(y, out)
  for x in xs:  # LiteRT's int8 CONCATENATION does not requantize.
    v.same_quant(x, y)


def _relu(v: _OpView) -> None:
  v.arity(1, 1)
  x = v.input(0)
  y = v.output(0)
  v.expect_shape(y, x.shape)
  if _quantize_multiplier_exp(scale_zero(x.tensor)[0] / scale_zero(y.tensor)[0]) is None:
    v.fail("the requantization multiplier s_x / s_y is not finite")


_RULES = {
    "CONV_2D": _conv, "DEPTHWISE_CONV_2D": _depthwise,
    "FULLY_CONNECTED": _fully_connected, "ADD": _add_sub, "SUB": _add_sub, "MUL": _mul,
    "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool, "MEAN": _mean, "RESHAPE": _reshape,
    "SOFTMAX": _softmax, "PAD": _pad, "CONCATENATION": _concatenation, "RELU": _relu,
    "RELU6": _relu,
}
SUPPORTED_BUILTINS = tuple(sorted(_RULES))


def check_builtin(checker, i: int, op, name: str, op_inputs: list[int],
                  op_outputs: list[int]) -> None:
  """Builtin operator i: one forge_tflm supports, at a version LiteRT resolves, then its
  rule. `checker` is model_check's graph check, which has checked the operator's table
  and its tensors."""
  rule = _RULES.get(name)
  if rule is None:
    checker.fail(f"builtin {name} is not supported by forge_tflm (supported:"
                 f" {', '.join(sorted(_RULES))})")
  version = int(checker.model.operatorCodes[op.opcodeIndex].version)
  if not 1 <= version <= MAX_OP_VERSION[name]:
    checker.fail(f"operator version {version} is not one LiteRT runs for {name}"
                 f" (1 to {MAX_OP_VERSION[name]})")
  rule(_OpView(checker, i, op, name, op_inputs, op_outputs))
