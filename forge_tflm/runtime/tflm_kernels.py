"""Builtin ops that the evaluator's reference mode runs with TFLite-Micro's arithmetic.

LiteRT's BUILTIN_REF kernels match TFLite-Micro's reference kernels bit for bit on the
ops of our models except one: its per-channel int8 FULLY_CONNECTED requantizes the
int32 accumulator with one rounding, ((acc * M + 2^(s-1)) >> s), while TFLM (and the
ESP-NN and CMSIS-NN kernels devices run) round twice, gemmlowp style:

    y = RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc << l, M), r) + z_y

(`tensorflow/lite/kernels/internal/common.cc`, MultiplyByQuantizedMultiplier without
TFLITE_SINGLE_ROUNDING). The two differ when the exact value lies just past a
half-integer, within the first rounding's step (ResNet-20: a logit of -20.50047 gives
-21 in TFLM, -20 in LiteRT: about 1 image in 200). So reference mode runs
FULLY_CONNECTED here, in int64 numpy, with TFLM's Prepare (QuantizeMultiplier of the
double effective scale) and Eval.
"""

from __future__ import annotations

import math

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from forge_tflm import tflite_graph as tg

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def quantize_multiplier(scale: float) -> tuple[int, int]:
  """TFLite's QuantizeMultiplier(double): (Q31 significand, exponent)."""
  if scale == 0.0:
    return 0, 0
  q, shift = math.frexp(scale)
  q_fixed = int(math.floor(abs(q) * (1 << 31) + 0.5))  # TfLiteRound: half away.
  q_fixed = q_fixed if q >= 0 else -q_fixed
  if q_fixed == (1 << 31):
    q_fixed //= 2
    shift += 1
  if shift < -31:  # Everything would shift out: TFLite stores zero.
    return 0, 0
  return q_fixed, shift


def saturating_rounding_doubling_high_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """gemmlowp::SaturatingRoundingDoublingHighMul on int32 values (int64 arrays)."""
  a = np.asarray(a, np.int64)
  b = np.asarray(b, np.int64)
  ab = a * b
  nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
  # C++ integer division truncates toward zero.
  num = ab + nudge
  high = np.where(num >= 0, num >> 31, -((-num) >> 31))
  overflow = (a == b) & (a == _INT32_MIN)
  return np.where(overflow, _INT32_MAX, high)


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
  """gemmlowp::RoundingDivideByPOT: x / 2^exponent, ties away from zero."""
  x = np.asarray(x, np.int64)
  exponent = np.asarray(exponent, np.int64)
  mask = (np.int64(1) << exponent) - 1
  remainder = x & mask
  threshold = (mask >> 1) + (x < 0)
  return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(acc: np.ndarray, multiplier: np.ndarray,
                                     shift: np.ndarray) -> np.ndarray:
  """TFLM's MultiplyByQuantizedMultiplier(int32 x, ...), the double-rounding one."""
  shift = np.asarray(shift, np.int64)
  left = np.maximum(shift, 0)
  right = np.maximum(-shift, 0)
  shifted = np.asarray(acc, np.int64) * (np.int64(1) << left)
  return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(shifted, multiplier),
                                right)


def activation_range(code: int, scale: float, zero_point: int) -> tuple[int, int]:
  """TFLite's CalculateActivationRangeQuantized for int8 outputs."""
  def quantize(v: float) -> int:
    q = float(np.float32(v) / np.float32(scale))  # The float32 quotient, as in C++.
    return zero_point + int(math.copysign(math.floor(abs(q) + 0.5), q))  # std::round

  low, high = -128, 127
  if code == schema.ActivationFunctionType.RELU:
    low = max(low, quantize(0.0))
  elif code == schema.ActivationFunctionType.RELU6:
    low, high = max(low, quantize(0.0)), min(high, quantize(6.0))
  elif code == schema.ActivationFunctionType.RELU_N1_TO_1:
    low, high = max(low, quantize(-1.0)), min(high, quantize(1.0))
  elif code != schema.ActivationFunctionType.NONE:
    raise ValueError(f"unsupported fused activation {code}")
  return low, high


class FullyConnected:
  """TFLM's int8 FULLY_CONNECTED (per-channel or per-tensor weights) for one op."""

  def __init__(self, model: "schema.ModelT", op: "schema.OperatorT"):
    sg = model.subgraphs[0]
    x_t, w_t = sg.tensors[op.inputs[0]], sg.tensors[op.inputs[1]]
    b_t = sg.tensors[op.inputs[2]] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    y_t = sg.tensors[op.outputs[0]]
    for t in (x_t, w_t, y_t):
      if t.type != schema.TensorType.INT8:
        raise ValueError("reference FULLY_CONNECTED on the host supports int8 only")
    self.weights = tg.buffer_array(model, w_t)
    if self.weights is None or self.weights.ndim != 2:
      raise ValueError("FULLY_CONNECTED weights must be a constant 2-D tensor")
    self.weights = self.weights.astype(np.int64)
    self.bias = (tg.buffer_array(model, b_t).astype(np.int64) if b_t is not None
                 else np.zeros(self.weights.shape[0], np.int64))
    s_x, self.z_x = tg.per_tensor_quant(x_t)
    s_y, self.z_y = tg.per_tensor_quant(y_t)
    w_scales = np.asarray(w_t.quantization.scale, np.float32)
    if w_scales.size not in (1, self.weights.shape[0]):
      raise ValueError("FULLY_CONNECTED weight scales must be per-tensor or per-channel")
    # TFLM's Prepare: the float32 scales widened to double, then QuantizeMultiplier.
    mults = [quantize_multiplier(float(np.float64(np.float32(s_x)) * np.float64(ws)
                                       / np.float64(np.float32(s_y))))
             for ws in np.broadcast_to(w_scales, (self.weights.shape[0],))]
    self.multiplier = np.array([m for m, _ in mults], np.int64)
    self.shift = np.array([s for _, s in mults], np.int64)
    options = op.builtinOptions
    self.keep_num_dims = bool(getattr(options, "keepNumDims", False))
    self.qmin, self.qmax = activation_range(options.fusedActivationFunction, s_y,
                                            self.z_y)

  def __call__(self, x: np.ndarray) -> np.ndarray:
    depth = self.weights.shape[1]
    rows = x.reshape(-1, depth).astype(np.int64) - self.z_x
    acc = rows @ self.weights.T + self.bias  # Exact: |acc| < 2^31 for int8 layers.
    y = multiply_by_quantized_multiplier(acc, self.multiplier, self.shift) + self.z_y
    y = np.clip(y, self.qmin, self.qmax).astype(np.int8)
    if self.keep_num_dims:
      return y.reshape(x.shape[:-1] + (self.weights.shape[0],))
    return y


# Builtins whose reference-mode arithmetic differs between LiteRT and TFLM.
TFLM_HOST_BUILTINS = {"FULLY_CONNECTED": FullyConnected}
