"""Exact int8 FULLY_CONNECTED outputs under the two requantization roundings in use.

LiteRT's BUILTIN_REF per-channel FULLY_CONNECTED rounds the int32 accumulator times
the fixed-point multiplier once ((acc * M + 2^(s-1)) >> s, "single rounding"); TFLite-
Micro's reference kernel and ESP-NN round twice (SaturatingRoundingDoublingHighMul,
then RoundingDivideByPOT). They disagree only when the exact value sits just past a
half-integer, closer than the first rounding's step (2^-right_shift of an output LSB),
which the first rounding then moves onto the tie (ResNet-20: -20.50047 -> -20 vs -21). `fc_outputs`
recomputes both from the op's int8 input, so a test can show that a device/host
logit difference is exactly this and nothing else.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from forge_tflm import tflite_graph as tg


def quantize_multiplier(scale: float) -> tuple[int, int]:
  """TFLite's QuantizeMultiplier (double -> Q31 multiplier, shift)."""
  if scale == 0.0:
    return 0, 0
  q, shift = math.frexp(scale)
  q_fixed = int(math.floor(abs(q) * (1 << 31) + 0.5)) * (1 if q >= 0 else -1)  # std::round
  if q_fixed == (1 << 31):
    q_fixed //= 2
    shift += 1
  if shift < -31:
    shift, q_fixed = 0, 0
  return q_fixed, shift


def _rounding_doubling_high_mul(a: np.ndarray, b: int) -> np.ndarray:
  ab = a.astype(object) * b
  out = []
  for v in ab:
    nudge = (1 << 30) if v >= 0 else 1 - (1 << 30)
    s = v + nudge
    q = abs(s) >> 31          # C++ division truncates toward zero
    out.append(q if s >= 0 else -q)
  return np.array(out, dtype=object)


def _rounding_divide_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
  mask = (1 << exponent) - 1
  out = []
  for v in x:
    remainder = v & mask
    threshold = (mask >> 1) + (1 if v < 0 else 0)
    out.append((v >> exponent) + (1 if remainder > threshold else 0))
  return np.array(out, dtype=object)


def requantize_double(acc: np.ndarray, mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
  """MultiplyByQuantizedMultiplier as TFLM (without TFLITE_SINGLE_ROUNDING) / ESP-NN."""
  out = []
  for a, m, s in zip(acc.tolist(), mult.tolist(), shift.tolist()):
    left, right = max(s, 0), max(-s, 0)
    hi = _rounding_doubling_high_mul(np.array([a * (1 << left)], object), m)
    out.append(int(_rounding_divide_by_pot(hi, right)[0]))
  return np.array(out, np.int64)


def requantize_single(acc: np.ndarray, mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
  """MultiplyByQuantizedMultiplier with TFLITE_SINGLE_ROUNDING (LiteRT reference)."""
  out = []
  for a, m, s in zip(acc.tolist(), mult.tolist(), shift.tolist()):
    total = 31 - s
    out.append((a * m + (1 << (total - 1))) >> total)
  return np.array(out, np.int64)


@dataclasses.dataclass
class FcOutputs:
  double: np.ndarray   # int8 result with two roundings (TFLM / ESP-NN)
  single: np.ndarray   # int8 result with one rounding (LiteRT BUILTIN_REF)
  exact: np.ndarray    # float: acc * M * 2^(shift-31) + z_y, before rounding


def fc_outputs(model_bytes: bytes, op_index: int, x: np.ndarray) -> FcOutputs:
  """Both roundings of FULLY_CONNECTED op `op_index` for its int8 input `x` (batch 1)."""
  model = tg.load_model(model_bytes)
  sg = model.subgraphs[0]
  op = sg.operators[op_index]
  if tg.op_name(model, op) != "FULLY_CONNECTED":
    raise ValueError(f"op {op_index} is {tg.op_name(model, op)}, not FULLY_CONNECTED")
  t_in, t_w = sg.tensors[op.inputs[0]], sg.tensors[op.inputs[1]]
  t_out = sg.tensors[op.outputs[0]]
  w = tg.buffer_array(model, t_w).astype(np.int64)            # [out, in]
  bias = (tg.buffer_array(model, sg.tensors[op.inputs[2]]).astype(np.int64)
          if len(op.inputs) > 2 and op.inputs[2] >= 0 else np.zeros(w.shape[0], np.int64))
  s_x, z_x = tg.per_tensor_quant(t_in)
  s_y, z_y = tg.per_tensor_quant(t_out)
  w_scales = np.asarray(t_w.quantization.scale, np.float32)
  if w_scales.size == 1:
    w_scales = np.full(w.shape[0], w_scales[0], np.float32)
  acc = (np.asarray(x, np.int64).reshape(-1) - z_x) @ w.T + bias
  mults, shifts = [], []
  for ws in w_scales:
    # As TFLM's PopulateConvolutionQuantizationParams: doubles from the float32 scales.
    m, s = quantize_multiplier(float(np.float32(s_x)) * float(ws) / float(np.float32(s_y)))
    mults.append(m)
    shifts.append(s)
  mults, shifts = np.array(mults, np.int64), np.array(shifts, np.int64)
  lo, hi = -128, 127  # no fused activation on a logits layer; checked below
  act = getattr(op.builtinOptions, "fusedActivationFunction", 0)
  if act:
    raise ValueError("fc_outputs handles FULLY_CONNECTED without a fused activation only")
  double = np.clip(requantize_double(acc, mults, shifts) + z_y, lo, hi).astype(np.int8)
  single = np.clip(requantize_single(acc, mults, shifts) + z_y, lo, hi).astype(np.int8)
  exact = acc.astype(np.float64) * mults.astype(np.float64) * np.exp2(shifts - 31.0) + z_y
  return FcOutputs(double=double, single=single, exact=exact)
