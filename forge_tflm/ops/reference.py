"""Numpy reference of FORGE_RECALIB: the executable definition of SPEC.md.

Every float operation is an explicit np.float32 operation in the order of
custom_ops/forge_recalib/SPEC.md (numpy float32 ufuncs are correctly rounded
and never fuse multiply-add), integer sums are int64. The C core
(custom_ops/forge_recalib/src/forge_recalib.c) must match this bit for bit.
Constants are np.float32 so that no operand is silently promoted to float64.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from forge_tflm.ops.options import ACTIVATIONS, MODES, VARIANCES, RecalibOptions, core

F32 = np.float32

# The C core's limits (forge_recalib.h), through the binding.
MAX_M = core().MAX_M
MAX_C = core().MAX_C
SCALE_MIN = F32(core().SCALE_MIN)
SCALE_MAX = F32(core().SCALE_MAX)
TARGET_MAX = F32(core().TARGET_MAX)


@dataclasses.dataclass(frozen=True)
class PreparedQuant:
  """Per-tensor constants computed once (SPEC "Prepare")."""
  s_x: np.float32
  z_x: int
  s_y: np.float32
  z_y: int
  r: np.float32
  inv_sy: np.float32
  sx2: np.float32
  qmin: int
  qmax: int


def _round_half_away_nonneg(v: np.float32) -> int:
  """round() of TFLite (half away from zero) for v >= 0, v < 256, exactly."""
  i = int(v)  # Truncation; exact because v < 256.
  frac = F32(v - F32(i))  # Exact: v and i share the binade scale.
  return i + (1 if frac >= F32(0.5) else 0)


def activation_range(activation: str, s_y: np.float32, z_y: int) -> tuple[int, int]:
  """[qmin, qmax] as TFLite's CalculateActivationRangeQuantized (int8)."""
  act = ACTIVATIONS[activation]
  qmin, qmax = -128, 127
  if act.low == 0.0:
    qmin = max(-128, z_y)
  if act.high != math.inf:
    top = F32(F32(act.high) / F32(s_y))
    if top < F32(256.0):  # Larger values saturate at 127 anyway.
      qmax = min(qmax, z_y + _round_half_away_nonneg(top))
  return qmin, qmax


def prepare_quant(activation: str, s_x, z_x: int, s_y, z_y: int) -> PreparedQuant:
  """Validates scales/zero points and precomputes r, 1/s_y, s_x^2, qmin/qmax."""
  s_x, s_y = F32(s_x), F32(s_y)
  if not SCALE_MIN <= s_x <= SCALE_MAX:
    raise ValueError("input scale must be in [2^-40, 2^40]")
  if not SCALE_MIN <= s_y <= SCALE_MAX:
    raise ValueError("output scale must be in [2^-40, 2^40]")
  if not -128 <= int(z_x) <= 127:
    raise ValueError("input zero point must be in [-128, 127]")
  if not -128 <= int(z_y) <= 127:
    raise ValueError("output zero point must be in [-128, 127]")
  if activation not in ACTIVATIONS:
    raise ValueError("unknown activation")
  qmin, qmax = activation_range(activation, s_y, int(z_y))
  return PreparedQuant(s_x=s_x, z_x=int(z_x), s_y=s_y, z_y=int(z_y),
                       r=F32(s_x / s_y), inv_sy=F32(F32(1.0) / s_y),
                       sx2=F32(s_x * s_x), qmin=qmin, qmax=qmax)


def check_targets(beta: np.ndarray, gamma_abs: np.ndarray) -> None:
  if beta.dtype != np.float32 or gamma_abs.dtype != np.float32:
    raise ValueError("beta and gamma_abs must be float32")
  if beta.ndim != 1 or beta.shape != gamma_abs.shape:
    raise ValueError("beta and gamma_abs must be 1-D arrays of equal length")
  if not 1 <= beta.shape[0] <= MAX_C:
    raise ValueError("channel count must be in [1, 65536]")
  # NaN fails the comparisons, so it is rejected too.
  if not np.all((beta >= -TARGET_MAX) & (beta <= TARGET_MAX)):
    raise ValueError("beta must be finite with |beta| <= 2^40")
  if not np.all((gamma_abs >= F32(0)) & (gamma_abs <= TARGET_MAX)):
    raise ValueError("gamma_abs must be finite with 0 <= gamma_abs <= 2^40")


def reset_state(beta: np.ndarray, gamma_abs: np.ndarray) -> np.ndarray:
  """State [mu_0..mu_{C-1}, var_0..var_{C-1}] = [beta, gamma_abs^2] (float32)."""
  check_targets(beta, gamma_abs)
  return np.concatenate([beta, gamma_abs * gamma_abs]).astype(np.float32)


@np.errstate(all="ignore")
def coefficients(mu, var, beta, gamma_abs, eps, q: PreparedQuant):
  """SPEC step 5 (vectorized over channels, each op rounded to float32)."""
  inv_std = F32(1.0) / np.sqrt(var + F32(eps))
  gs = gamma_abs * inv_std
  a = gs * q.r
  b = (beta - mu * gs) * q.inv_sy + F32(q.z_y)
  return a.astype(np.float32), b.astype(np.float32)


@np.errstate(all="ignore")
def requantize(x2d: np.ndarray, a: np.ndarray, b: np.ndarray,
               q: PreparedQuant) -> np.ndarray:
  """SPEC step 6 on rows x channels: clamp (NaN -> qmin), round half up."""
  centered = (x2d.astype(np.int32) - np.int32(q.z_x)).astype(np.float32)
  v = centered * a + b  # Two float32 ufuncs: multiply, then add (no FMA).
  qmin_f, qmax_f = F32(q.qmin), F32(q.qmax)
  v = np.where(v >= qmin_f, v, qmin_f)  # NaN compares false -> qmin.
  v = np.where(v > qmax_f, qmax_f, v).astype(np.float32)
  return ((v + F32(128.5)).astype(np.int32) - 128).astype(np.int8)


@np.errstate(all="ignore")  # inf/NaN are defined (NaN -> qmin), not errors.
def recalib_step(x: np.ndarray, beta: np.ndarray, gamma_abs: np.ndarray,
                 state: np.ndarray, *, opts: RecalibOptions, q: PreparedQuant,
                 mode: str = "adapt") -> tuple[np.ndarray, np.ndarray]:
  """One invocation; returns (y, new_state). Inputs are not modified.

  x: int8 [N, ..., C] (channels last); state: float32 [2C].
  """
  if mode not in MODES:
    raise ValueError("unknown mode")
  if opts.variance not in VARIANCES:
    raise ValueError("unknown variance estimator")
  n, c = x.shape[0], x.shape[-1]
  x2d = x.reshape(-1, c)
  m_rows = x2d.shape[0]
  if not 1 <= m_rows <= MAX_M:
    raise ValueError("N*H*W per channel must be in [1, 2^22]")
  if mode == "source":  # The clean targets, as a reset state; the state is untouched.
    clean = reset_state(np.asarray(beta, np.float32), np.asarray(gamma_abs, np.float32))
    a, b = coefficients(clean[:c], clean[c:], beta, gamma_abs, opts.eps, q)
    return requantize(x2d, a, b, q).reshape(x.shape), state.astype(np.float32).copy()
  mu = state[:c].astype(np.float32)
  var = state[c:].astype(np.float32)
  # SPEC "Repair": a channel whose state is not usable restarts from its targets.
  bad = ~(np.isfinite(mu) & np.isfinite(var) & (var >= 0))
  if bad.any():
    clean = reset_state(np.asarray(beta, np.float32), np.asarray(gamma_abs, np.float32))
    mu = np.where(bad, clean[:c], mu).astype(np.float32)
    var = np.where(bad, clean[c:], var).astype(np.float32)
  if mode == "adapt":
    xi = x2d.astype(np.int64)
    s1 = xi.sum(axis=0)
    s2 = (xi * xi).sum(axis=0)
    big_m = np.int64(m_rows)
    mq = (s1 - big_m * np.int64(q.z_x)).astype(np.float32) / F32(m_rows)
    mean_b = q.s_x * mq
    var_q = (big_m * s2 - s1 * s1).astype(np.float32) / F32(big_m * big_m)
    var_b = q.sx2 * var_q
    m = opts.momentum_at(n)
    om = F32(F32(1.0) - m)
    mu_new = om * mu + m * mean_b
    if opts.variance == "running":
      d = mean_b - mu_new
      v_used = var_b + d * d
    else:
      v_used = var_b
    var_new = om * var + m * v_used
    mu, var = mu_new.astype(np.float32), var_new.astype(np.float32)
  a, b = coefficients(mu, var, beta, gamma_abs, opts.eps, q)
  y = requantize(x2d, a, b, q).reshape(x.shape)
  return y, np.concatenate([mu, var]).astype(np.float32)


# ------------------------------------------------------------- integer arithmetic
# SPEC "Integer arithmetic" (option arithmetic = "int"): every step exact in integers,
# scalars as Python ints and vectors as numpy int64 (all intermediates fit).

MU_FRAC, VAR_FRAC = 16, 12  # fraction bits of mu, var
MULT_MAX = 2**22  # per-channel multiplier: |q * mult| <= 2^29
BIAS_MAX = 2**30  # folded per-channel bias, saturated: |q * mult + bias| < 2^31
MU_MAX = 2**30  # |mu| (x's quantized units, Q16): 16384 units
VAR_MAX = 2**30 - 1  # var (units^2, Q12): 262144 units^2
_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1
_NEWTON_STEPS = 4
_ONE = (0, 2**30, 0)  # 1.0 as an fx number (sign, mantissa, exponent)


def rdbpot(x, e):
  """gemmlowp RoundingDivideByPOT: x / 2^e rounded half away from zero (x int64,
  0 <= e <= 62; scalars or numpy arrays)."""
  if isinstance(x, np.ndarray) or isinstance(e, np.ndarray):
    x, e = np.asarray(x, np.int64), np.asarray(e, np.int64)
    mask = (np.int64(1) << e) - 1
    thr = (mask >> 1) + (x < 0)
    return (x >> e) + ((x & mask) > thr)
  mask = (1 << e) - 1
  return (x >> e) + (1 if (x & mask) > (mask >> 1) + (1 if x < 0 else 0) else 0)


def srdhm(a, b):
  """gemmlowp SaturatingRoundingDoublingHighMul of int32 a and b (numpy int64 arrays
  holding int32 values): round(a * b / 2^31), ties away from zero, INT32_MIN^2 ->
  INT32_MAX."""
  a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
  ab = a * b
  t = ab + np.where(ab >= 0, 2**30, 1 - 2**30)
  q = np.where(t >= 0, t >> 31, -((-t) >> 31))  # C's division truncates toward 0.
  return np.where((a == _INT32_MIN) & (b == _INT32_MIN), _INT32_MAX, q)


def _div_round(n: int, d: int) -> int:
  """n / d (d > 0) rounded half away from zero."""
  q = (abs(n) + (d >> 1)) // d
  return q if n >= 0 else -q


def fx_of(f) -> tuple[int, int, int]:
  """A finite float32 exactly as (sign, mantissa in [2^30, 2^31) or 0, exponent):
  value = (-1)^sign * mantissa * 2^(exponent - 30), read from its bits."""
  bits = int(np.asarray(f, np.float32).reshape(()).view(np.uint32))
  sign, biased, frac = bits >> 31, (bits >> 23) & 255, bits & 0x7FFFFF
  if biased == 0 and frac == 0:
    return (sign, 0, 0)
  exp = biased - 127
  if biased == 0:  # Subnormal: normalize.
    exp = -126
    while frac < 2**23:
      frac, exp = frac << 1, exp - 1
  else:
    frac |= 2**23
  return (sign, frac << 7, exp)


def _fx_norm(sign: int, mant: int, exp: int) -> tuple[int, int, int]:
  return (sign, 2**30, exp + 1) if mant == 2**31 else (sign, mant, exp)


def fx_mul(a, b) -> tuple[int, int, int]:
  if a[1] == 0 or b[1] == 0:
    return (a[0] ^ b[0], 0, 0)
  p = a[1] * b[1]
  if p >= 2**61:
    return _fx_norm(a[0] ^ b[0], rdbpot(p, 31), a[2] + b[2] + 1)
  return _fx_norm(a[0] ^ b[0], rdbpot(p, 30), a[2] + b[2])


def fx_div(a, b) -> tuple[int, int, int]:
  """a / b, b != 0."""
  if a[1] == 0:
    return (a[0] ^ b[0], 0, 0)
  if a[1] >= b[1]:
    return _fx_norm(a[0] ^ b[0], _div_round(a[1] << 30, b[1]), a[2] - b[2])
  return _fx_norm(a[0] ^ b[0], _div_round(a[1] << 31, b[1]), a[2] - b[2] - 1)


def fx_fixed(a, frac: int, lo: int, hi: int) -> int:
  """round(a * 2^frac) (ties away from zero), clamped to [lo, hi]."""
  sign, mant, exp = a
  sh = exp - 30 + frac
  if mant == 0 or sh < -62:
    v = 0
  elif sh > 32:
    v = 2**63
  elif sh >= 0:
    v = mant << sh
  else:
    v = rdbpot(mant, -sh)
  return max(lo, min(hi, -v if sign else v))


@dataclasses.dataclass(frozen=True)
class IntTensor:
  """Per-tensor constants of the integer arithmetic (SPEC "Integer arithmetic")."""
  inv_sx: tuple
  inv_sy: tuple
  eps_v: int
  z_x: int
  z_y: int
  qmin: int
  qmax: int


def int_tensor(q: PreparedQuant, eps) -> IntTensor:
  inv_sx, inv_sy = fx_div(_ONE, fx_of(q.s_x)), fx_div(_ONE, fx_of(q.s_y))
  eps_v = fx_fixed(fx_mul(fx_of(eps), fx_mul(inv_sx, inv_sx)), VAR_FRAC, 1, VAR_MAX)
  return IntTensor(inv_sx, inv_sy, eps_v, q.z_x, q.z_y, q.qmin, q.qmax)


def int_rate(opts: RecalibOptions, n: int) -> int:
  """The EMA rate m in Q31 (SPEC "Integer arithmetic" step I3)."""
  if opts.window is not None:
    return min(_INT32_MAX, _div_round(n << 31, opts.window))
  return fx_fixed(fx_of(opts.momentum), 31, 0, _INT32_MAX)


def int_reset_state(beta: np.ndarray, gamma_abs: np.ndarray, s_x) -> np.ndarray:
  """int32 [mu (Q16), var (Q12)] in x's quantized units: beta / s_x, (gamma_abs /
  s_x)^2, saturated."""
  check_targets(beta, gamma_abs)
  inv_sx = fx_div(_ONE, fx_of(np.float32(s_x)))
  mu = [fx_fixed(fx_mul(fx_of(b), inv_sx), MU_FRAC, -MU_MAX, MU_MAX) for b in beta]
  var = []
  for g in gamma_abs:
    gx = fx_mul(fx_of(g), inv_sx)
    var.append(fx_fixed(fx_mul(gx, gx), VAR_FRAC, 0, VAR_MAX))
  return np.array(mu + var, np.int32)


def int_inv_sqrt(v: int) -> tuple[int, int, int]:
  """1 / sqrt(v / 2^12) as an fx number, v in [1, VAR_MAX]: Newton's iteration in
  Q29 on v normalized to [2^28, 2^30) by an even shift (SPEC step I5)."""
  j = (30 - v.bit_length()) >> 1
  n = v << (2 * j)
  y = 1207959552 - 5 * (n >> 3)  # 2.25 - 1.25 X in Q29, X = n / 2^30
  for _ in range(_NEWTON_STEPS):
    y2 = rdbpot(y * y, 29)
    t = rdbpot(n * y2, 30)
    y = rdbpot(y * (3 * 2**29 - t), 30)
  if y >= 2**30:
    return (0, y, j - 8)
  return (0, 2 * y, j - 9)


def int_gain(var: int, gamma_c, t: IntTensor) -> tuple[int, int, int]:
  """A = gamma_abs / s_y / sqrt(var + eps) in output steps per x step (fx, I6)."""
  vpe = min(VAR_MAX, var + t.eps_v)
  return fx_mul(fx_mul(fx_of(gamma_c), t.inv_sy), int_inv_sqrt(vpe))


def int_out_shift(gains) -> int:
  """The tensor's right shift S (SPEC I6): 21 - E, E the largest gain exponent
  clamped to [-1, 6], so that every multiplier round(A * 2^S) is <= 2^22."""
  exps = [min(max(a[2], -1), 6) for a in gains if a[1] != 0]
  return 21 - max(exps, default=-1)


def int_coefficients(mu: np.ndarray, var: np.ndarray, beta, gamma_abs,
                     t: IntTensor) -> tuple[np.ndarray, int, np.ndarray]:
  """(multiplier per channel, the tensor's shift S, folded bias per channel):
  SPEC steps I5-I7."""
  gains = [int_gain(int(var[c]), gamma_abs[c], t) for c in range(len(mu))]
  s = int_out_shift(gains)
  mult, bias = [], []
  for c, a in enumerate(gains):
    m = fx_fixed(a, s, 0, MULT_MAX)
    by = fx_fixed(fx_mul(fx_of(beta[c]), t.inv_sy), s, -2**40, 2**40)
    b = by + (t.z_y << s) + (1 << (s - 1)) - t.z_x * m - rdbpot(int(mu[c]) * m, MU_FRAC)
    mult.append(m)
    bias.append(max(-BIAS_MAX, min(BIAS_MAX, b)))
  return np.array(mult, np.int64), s, np.array(bias, np.int64)


def int_requantize(x2d: np.ndarray, mult, shift: int, bias, t: IntTensor) -> np.ndarray:
  """SPEC step I8 on rows x channels: one int32 multiply-add and one shift per
  element (|q * mult + bias| < 2^31 by construction)."""
  v = (x2d.astype(np.int64) * mult + bias) >> shift
  return np.clip(v, t.qmin, t.qmax).astype(np.int8)


def int_batch_moments(x2d: np.ndarray, z_x: int) -> tuple[list[int], list[int]]:
  """(mean Q16, variance Q12) of each channel's values (SPEC step I2)."""
  xi = x2d.astype(np.int64)
  m = xi.shape[0]
  s1, s2 = xi.sum(axis=0), (xi * xi).sum(axis=0)
  means = [_div_round((int(a) - m * z_x) << MU_FRAC, m) for a in s1]
  var = [((m * int(b) - int(a) * int(a)) * 2**(VAR_FRAC + 1) // (m * m) + 1) >> 1
         for a, b in zip(s1, s2)]
  return means, var


def _srdhm1(a: int, b: int) -> int:
  return int(srdhm(a, b))


def int_update(mu: np.ndarray, var: np.ndarray, means, var_b, m31: int,
               running: bool) -> tuple[np.ndarray, np.ndarray]:
  """The EMA of steps I3-I4, per channel; returns the new (mu, var)."""
  mu_new, var_new = [], []
  for c in range(len(mu)):
    mc = int(mu[c]) + _srdhm1(means[c] - int(mu[c]), m31)
    v_used = var_b[c]
    if running:
      d = means[c] - mc
      v_used = min(VAR_MAX, v_used + min(VAR_MAX, rdbpot(d * d, 2 * MU_FRAC - VAR_FRAC)))
    mu_new.append(mc)
    var_new.append(int(var[c]) + _srdhm1(v_used - int(var[c]), m31))
  return np.array(mu_new, np.int64), np.array(var_new, np.int64)


def int_recalib_step(x: np.ndarray, beta: np.ndarray, gamma_abs: np.ndarray,
                     state: np.ndarray, *, opts: RecalibOptions, q: PreparedQuant,
                     mode: str = "adapt") -> tuple[np.ndarray, np.ndarray]:
  """One invocation of the integer arithmetic; returns (y, new int32 state)."""
  if mode not in MODES:
    raise ValueError("unknown mode")
  n, c = x.shape[0], x.shape[-1]
  x2d = x.reshape(-1, c)
  if not 1 <= x2d.shape[0] <= MAX_M:
    raise ValueError("N*H*W per channel must be in [1, 2^22]")
  t = int_tensor(q, opts.eps)
  clean = int_reset_state(beta, gamma_abs, q.s_x).astype(np.int64)
  state = np.asarray(state, np.int32).copy()
  if mode == "source":
    mult, shift, bias = int_coefficients(clean[:c], clean[c:], beta, gamma_abs, t)
    return int_requantize(x2d, mult, shift, bias, t).reshape(x.shape), state
  mu, var = state[:c].astype(np.int64), state[c:].astype(np.int64)
  bad = (mu < -MU_MAX) | (mu > MU_MAX) | (var < 0) | (var > VAR_MAX)  # "Repair"
  mu, var = np.where(bad, clean[:c], mu), np.where(bad, clean[c:], var)
  if mode == "adapt":
    means, var_b = int_batch_moments(x2d, q.z_x)
    mu, var = int_update(mu, var, means, var_b, int_rate(opts, n),
                         opts.variance == "running")
  mult, shift, bias = int_coefficients(mu, var, beta, gamma_abs, t)
  y = int_requantize(x2d, mult, shift, bias, t).reshape(x.shape)
  return y, np.concatenate([mu, var]).astype(np.int32)
