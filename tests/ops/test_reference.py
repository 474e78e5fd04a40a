"""Semantics of the FORGE_RECALIB numpy reference (the SPEC's definition)."""

import numpy as np
import pytest

from forge_tflm import ops
from forge_tflm.ops import reference

F32 = np.float32


def _quantize(v, s, z):
  return np.clip(np.rint(v / s) + z, -128, 127).astype(np.int8)


def _stream(rng, beta, gamma, n, hw, s, z, shift=0.0, stretch=1.0):
  """int8 pre-activations whose per-channel real stats are (beta, gamma^2),
  optionally shifted/stretched (a corrupted input distribution)."""
  real = rng.normal(size=(n, hw, hw, beta.size)) * gamma * stretch + beta + shift
  return _quantize(real, s, z)


def test_frozen_clean_state_is_identity_when_scales_match():
  # A = gamma/sqrt(gamma^2+eps) ~ 1 - tiny, B ~ z: every q maps to itself.
  c = 4
  beta = np.array([0.3, -1.0, 2.0, 0.0], np.float32)
  gamma = np.array([1.0, 0.5, 2.0, 0.25], np.float32)
  state = ops.RecalibState(beta, gamma)
  q = ops.QuantParams(s_x=0.05, z_x=-3, s_y=0.05, z_y=-3)
  x = np.tile(np.arange(-128, 128, dtype=np.int8)[:, None], (1, c))[None, :, None, :]
  opts = ops.RecalibOptions(momentum=0.1, eps=1e-12)
  y = ops.forge_recalib_reference(np.ascontiguousarray(x), state, opts, q, "frozen")
  np.testing.assert_array_equal(y, x)


def test_adapt_on_unshifted_stream_is_nearly_a_no_op():
  rng = np.random.default_rng(0)
  c = 8
  beta = rng.normal(0, 1, size=c).astype(np.float32)
  gamma = rng.uniform(0.5, 1.5, size=c).astype(np.float32)
  q = ops.QuantParams(s_x=0.04, z_x=-10, s_y=0.04, z_y=-10)
  opts = ops.RecalibOptions(momentum=0.1)
  state = ops.RecalibState(beta, gamma)
  diffs = []
  for _ in range(20):
    x = _stream(rng, beta, gamma, 32, 8, q.s_x, q.z_x)
    y = ops.forge_recalib_reference(x, state, opts, q)
    diffs.append(np.abs(y.astype(int) - x.astype(int)))
  diffs = np.concatenate([d.ravel() for d in diffs])
  assert np.mean(diffs <= 1) > 0.99
  # The state stays near the clean targets (batch noise only).
  np.testing.assert_allclose(state.mu, beta, atol=0.1)
  np.testing.assert_allclose(np.sqrt(state.var), gamma, rtol=0.1)


def test_adapt_undoes_a_shift_and_stretch():
  rng = np.random.default_rng(1)
  c = 6
  beta = rng.normal(0, 0.5, size=c).astype(np.float32)
  gamma = rng.uniform(0.5, 1.0, size=c).astype(np.float32)
  q = ops.QuantParams(s_x=0.05, z_x=0, s_y=0.05, z_y=0)
  state = ops.RecalibState(beta, gamma)
  opts = ops.RecalibOptions(momentum=1.0, variance="batch")  # Pure batch stats.
  x = _stream(rng, beta, gamma, 64, 8, q.s_x, q.z_x, shift=0.8, stretch=1.5)
  y = ops.forge_recalib_reference(x, state, opts, q).astype(np.float64)
  real = (y - q.z_y) * q.s_y
  np.testing.assert_allclose(real.reshape(-1, c).mean(0), beta, atol=0.05)
  np.testing.assert_allclose(real.reshape(-1, c).std(0), gamma, rtol=0.05)


def test_momentum_zero_never_moves_the_state():
  rng = np.random.default_rng(2)
  beta, gamma = np.ones(3, np.float32), np.ones(3, np.float32)
  q = ops.QuantParams(0.1, 0, 0.1, 0)
  adapt, frozen = ops.RecalibState(beta, gamma), ops.RecalibState(beta, gamma)
  for _ in range(3):
    x = rng.integers(-128, 128, size=(4, 2, 2, 3), dtype=np.int8)
    y1 = ops.forge_recalib_reference(x, adapt, ops.RecalibOptions(momentum=0.0), q)
    y2 = ops.forge_recalib_reference(x, frozen, ops.RecalibOptions(momentum=0.0), q,
                                     "frozen")
    np.testing.assert_array_equal(y1, y2)
  np.testing.assert_array_equal(adapt.data, frozen.data)


def test_window_momentum_and_state_update_by_hand():
  # N = 8, W = 32 -> m = 0.25; channel values known exactly.
  x = np.zeros((8, 1, 1, 1), np.int8)
  x[:4] = 10
  x[4:] = 20
  q = ops.QuantParams(s_x=0.5, z_x=2, s_y=0.5, z_y=0)
  state = ops.RecalibState(np.array([1.0], np.float32), np.array([2.0], np.float32))
  opts = ops.RecalibOptions(window=32, variance="running")
  ops.forge_recalib_reference(x, state, opts, q)
  mean_b = 0.5 * (15 - 2)  # 6.5
  var_b = 0.25 * 25.0  # q variance 25
  mu = 0.75 * 1.0 + 0.25 * mean_b
  var = 0.75 * 4.0 + 0.25 * (var_b + (mean_b - mu) ** 2)
  assert state.mu[0] == F32(mu)
  assert state.var[0] == pytest.approx(var, rel=1e-6)
  assert ops.RecalibOptions(window=32).momentum_at(8) == F32(0.25)
  assert ops.RecalibOptions(window=4).momentum_at(8) == F32(1.0)  # min(1, N/W)
  assert ops.RecalibOptions(momentum=0.3).momentum_at(8) == F32(0.3)


def test_reset_restores_clean_targets():
  rng = np.random.default_rng(3)
  beta = np.array([0.5, -0.5], np.float32)
  gamma = np.array([3.0, 0.1], np.float32)
  state = ops.RecalibState(beta, gamma)
  q = ops.QuantParams(0.1, 0, 0.1, 0)
  ops.forge_recalib_reference(rng.integers(-128, 128, (4, 3, 3, 2), dtype=np.int8),
                              state, ops.RecalibOptions(momentum=0.5), q)
  assert not np.array_equal(state.mu, beta)
  state.reset()
  np.testing.assert_array_equal(state.mu, beta)
  np.testing.assert_array_equal(state.var, gamma * gamma)


def test_activation_ranges_match_tflite_formula():
  # TFLite: qmin = max(-128, z + round(0/s)), qmax = min(127, z + round(6/s)),
  # round = half away from zero on the float32 quotient.
  for s_y in [0.01, 0.02, 6 / 255, 6 / 200.5, 0.047058824, 1.0, 4.0, 1e-6, 100.0]:
    for z in [-128, -100, 0, 50, 127]:
      six = float(F32(6.0) / F32(s_y))
      rounded = int(np.floor(six + 0.5)) if six < 1e9 else 10**9
      if abs(six - np.floor(six) - 0.5) < 1e-12:
        rounded = int(np.floor(six)) + 1
      assert reference.activation_range("relu6", F32(s_y), z) == (
          max(-128, z), min(127, z + rounded))
      assert reference.activation_range("relu", F32(s_y), z) == (max(-128, z), 127)
      assert reference.activation_range("none", F32(s_y), z) == (-128, 127)


def test_round_half_away_on_exact_halves():
  # 6 / s_y = 2.5 exactly -> 3 (TFLite's std::round), not 2 (numpy's round).
  assert reference.activation_range("relu6", F32(2.4), 0) == (0, 3)
  assert reference.activation_range("relu6", F32(4.0), 0) == (0, 2)  # 1.5 -> 2


def test_requantize_rounds_half_up_and_maps_nan_to_qmin():
  q = reference.prepare_quant("none", 1.0, 0, 1.0, 0)
  x = np.array([[0], [0], [0], [0], [0]], np.int8)
  b = np.array([[0.5], [-0.5], [1.5], [-1.5], [np.nan]], np.float32)
  a = np.ones(1, np.float32)
  y = [reference.requantize(x[i:i + 1], a, b[i], q)[0, 0] for i in range(5)]
  assert y == [1, 0, 2, -1, -128]
  # Float32 rounding of v + 128.5 is part of the rule: 0.49999997 -> 1.
  y = reference.requantize(x[:1], a, np.array([0.49999997], np.float32), q)
  assert y[0, 0] == 1


def test_saturated_batch_at_max_m_has_exact_stats():
  # M = 2^22 values of -128: S2 = 2^36 needs int64; variance must be exactly 0.
  x = np.full((1 << 12, 32, 32, 1), -128, np.int8)
  state = ops.RecalibState(np.zeros(1, np.float32), np.ones(1, np.float32))
  q = ops.QuantParams(s_x=0.25, z_x=0, s_y=1.0, z_y=0)
  ops.forge_recalib_reference(x, state, ops.RecalibOptions(momentum=1.0,
                                                           variance="batch"), q)
  assert state.mu[0] == F32(-32.0)
  assert state.var[0] == F32(0.0)


def test_reference_keeps_float32_everywhere():
  rng = np.random.default_rng(4)
  case_state = ops.RecalibState(np.ones(3, np.float32), np.ones(3, np.float32))
  x = rng.integers(-128, 128, (2, 2, 2, 3), dtype=np.int8)
  q = reference.prepare_quant("relu", 0.1, 0, 0.2, 1)
  y, new_state = reference.recalib_step(
      x, case_state.beta, case_state.gamma_abs, case_state.data,
      opts=ops.RecalibOptions(momentum=0.3), q=q)
  assert y.dtype == np.int8 and new_state.dtype == np.float32
  assert all(isinstance(v, np.float32) for v in (q.r, q.inv_sy, q.sx2))
