"""The integer arithmetic (option arithmetic = "int", SPEC "Integer arithmetic").

C core (forge_recalib_s8_int through the ansi entry and the host's default variant)
== numpy reference, bit for bit (outputs and int32 state), on the randomized SPEC
corners of tests/ops/cases.py and on hand-made edges; the state stays in range on a
long adversarial stream; the integer op tracks the float op; the options refuse
the combination with class statistics.
"""

import numpy as np
import pytest

from forge_tflm import ops
from forge_tflm.ops import options, reference
from tests.ops import cases

pytestmark = pytest.mark.skipif(not ops.c_core_available(),
                                reason="C core not built (pip install -e .)")

_RUNS = ("default", "ansi")


def _int_case(case):
  return case.opts.replace(arithmetic="int")


def _check_stream(beta, gamma, opts, quant, batches, modes) -> None:
  op = ops.RecalibOp(opts, quant, beta, gamma)
  ref = op.state.copy()
  states = [op.state.copy() for _ in _RUNS]
  reset = np.empty_like(op.state.data)
  # The C core's own reset, on a node prepared as RecalibOp prepares it.
  node = options.core().Prepared(opts, float(quant.s_x), int(quant.z_x),
                                 float(quant.s_y), int(quant.z_y), op.state.beta,
                                 op.state.gamma_abs)
  node.int_state_reset(reset)
  np.testing.assert_array_equal(reset, ref.data, err_msg="reset")
  for step, (x, mode) in enumerate(zip(batches, modes)):
    y_ref = ops.forge_recalib_reference(x, ref, opts, quant, mode)
    for variant, state in zip(_RUNS, states):
      y = ops.forge_recalib_c(x, state, opts, quant, mode, variant=variant)
      where = f"{variant} step {step} {opts} {quant} {x.shape} {mode}"
      np.testing.assert_array_equal(y, y_ref, err_msg=where)
      np.testing.assert_array_equal(state.data, ref.data, err_msg=where)


def test_int_parity_randomized():
  rng = np.random.default_rng(37)
  for _ in range(300):
    case = cases.random_case(rng, max_elements=2048, steps=4)
    _check_stream(case.beta, case.gamma_abs, _int_case(case), case.quant, case.batches,
                  case.modes)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (64, 8, 8, 64), (1, 255, 257, 2), (65, 32, 32, 1),
                                   (4096, 32, 32, 1)])
def test_int_parity_edges(shape):
  """Saturated inputs, constant channels, M at 2^22, extreme scales and targets."""
  rng = np.random.default_rng(shape[0])
  c = shape[-1]
  x_sat = np.where(rng.random(shape) < 0.5, -128, 127).astype(np.int8)
  x_const = np.full(shape, 7, np.int8)
  big, tiny = np.float32(2.0**40), np.float32(2.0**-40)
  for s_x, s_y, beta, gamma, eps in [
      (tiny, big, np.full(c, big), np.full(c, big), 1e-5),
      (big, tiny, np.full(c, -big), np.zeros(c), 1e-30),
      (np.float32(0.05), np.float32(0.04), np.full(c, 1e-30), np.full(c, 1e-38), 3e38),
      (np.float32(0.05), np.float32(0.04), np.full(c, 0.3), np.full(c, 1.2), 1e-5)]:
    for opts in (ops.RecalibOptions(momentum=1.0, arithmetic="int", activation="relu6"),
                 ops.RecalibOptions(window=1, arithmetic="int", variance="batch"),
                 ops.RecalibOptions(momentum=0.0, arithmetic="int", eps=eps)):
      quant = ops.QuantParams(float(s_x), -128, float(s_y), 127)
      _check_stream(np.asarray(beta, np.float32), np.asarray(gamma, np.float32), opts,
                    quant, [x_sat, x_const, x_sat], ["adapt", "adapt", "frozen"])


def test_int_repair_restarts_out_of_range_channels():
  beta, gamma = np.array([0.5, -1.0], np.float32), np.array([1.0, 2.0], np.float32)
  quant = ops.QuantParams(0.05, 0, 0.05, 0)
  opts = ops.RecalibOptions(window=8, arithmetic="int")
  op = ops.RecalibOp(opts, quant, beta, gamma)
  clean = op.state.data.copy()
  op.state.data[:] = [2**31 - 1, 7, 100, -5]  # mu_0 out of range, var_1 negative
  ref = op.state.copy()
  x = np.zeros((1, 2, 2, 2), np.int8)
  np.testing.assert_array_equal(op(x, mode="frozen"), ops.forge_recalib_reference(
      x, ref, opts, quant, "frozen"))
  np.testing.assert_array_equal(op.state.data, clean)
  np.testing.assert_array_equal(op.state.data, ref.data)


def test_int_state_bounded_on_long_stream():
  """100,000 adversarial steps (saturated, constant, alternating inputs; rate 1 and
  tiny rates): the int32 state never leaves its range, the output stays defined."""
  rng = np.random.default_rng(5)
  beta = np.array([0.0, 3.0, -3.0, 100.0], np.float32)
  gamma = np.array([1.0, 0.0, 20.0, 1e-6], np.float32)
  quant = ops.QuantParams(0.05, 3, 0.1, -2)
  x_all = [np.full((1, 2, 2, 4), v, np.int8) for v in (-128, 127, 0)]
  x_all.append(np.where(rng.random((1, 2, 2, 4)) < 0.5, -128, 127).astype(np.int8))
  for opts in (ops.RecalibOptions(momentum=1.0, arithmetic="int"),
               ops.RecalibOptions(window=640, arithmetic="int"),
               ops.RecalibOptions(window=2**31 - 1, arithmetic="int", variance="batch")):
    op = ops.RecalibOp(opts, quant, beta, gamma)
    lo_mu = hi_mu = hi_var = 0
    for step in range(100_000 // 3):
      op(x_all[(step // 97 + step) % 4])
      mu, var = op.state.data[:4], op.state.data[4:]
      lo_mu, hi_mu = min(lo_mu, int(mu.min())), max(hi_mu, int(mu.max()))
      hi_var = max(hi_var, int(var.max()))
      assert var.min() >= 0
    assert -reference.MU_MAX <= lo_mu and hi_mu <= reference.MU_MAX
    assert hi_var <= reference.VAR_MAX


def test_int_tracks_float_op():
  """On a shifted stream the integer op's outputs equal the float op's but for
  rare one-step differences; its state is the float state in fixed point."""
  rng = np.random.default_rng(1)
  c = 16
  beta = rng.normal(size=c).astype(np.float32)
  gamma = np.abs(rng.normal(size=c) + 1).astype(np.float32)
  quant = ops.QuantParams(0.05, -3, 0.04, -10)
  f_opts = ops.RecalibOptions(window=64, activation="relu")
  f_op = ops.RecalibOp(f_opts, quant, beta, gamma)
  i_op = ops.RecalibOp(f_opts.replace(arithmetic="int"), quant, beta, gamma)
  diff = []
  for _ in range(100):
    real = rng.normal(size=(4, 8, 8, c)) * gamma * 1.7 + beta + 0.5
    x = np.clip(np.round(real / 0.05) - 3, -128, 127).astype(np.int8)
    diff.append(np.abs(f_op(x).astype(int) - i_op(x).astype(int)))
  diff = np.concatenate([d.ravel() for d in diff])
  assert diff.max() <= 1 and (diff != 0).mean() < 1e-4
  np.testing.assert_allclose(i_op.state.data[:c] / 2**16 * 0.05, f_op.state.mu,
                             rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(i_op.state.data[c:] / 2**12 * 0.05**2, f_op.state.var,
                             rtol=1e-3, atol=1e-5)


def test_int_newton_inverse_sqrt_accuracy():
  for v in [1, 2, 3, 4095, 4096, 4097, 2**20 + 1, reference.VAR_MAX] + list(
      np.random.default_rng(0).integers(1, reference.VAR_MAX, 2000)):
    _, mant, exp = reference.int_inv_sqrt(int(v))
    got = mant * 2.0**(exp - 30)
    assert got == pytest.approx(1 / np.sqrt(int(v) / 4096), rel=5e-9)


def test_int_options_round_trip():
  with pytest.raises(ValueError, match="unknown arithmetic"):
    ops.RecalibOptions(window=8, arithmetic="fixed")
  opts = ops.RecalibOptions(window=8, arithmetic="int")
  assert ops.decode_options(ops.encode_options(opts)) == opts
  assert ops.RecalibOptions(window=8, arithmetic="float").arithmetic is None
  assert b"arithmetic" not in ops.encode_options(ops.RecalibOptions(window=8))


def test_int_state_format_follows_options():
  beta, gamma = np.ones(3, np.float32), np.ones(3, np.float32)
  quant = ops.QuantParams(0.05, 0, 0.05, 0)
  f_op = ops.RecalibOp(ops.RecalibOptions(window=8), quant, beta, gamma)
  i_op = f_op.with_options(f_op.options.replace(arithmetic="int"))
  assert i_op.state.data.dtype == np.int32 and f_op.state.data.dtype == np.float32
  with pytest.raises(ValueError, match="arithmetic=int, the state is float32"):
    ops.RecalibOp(i_op.options, quant, beta, gamma, state=f_op.state)


def test_int_requantization_error_bound():
  """SPEC I8's precision: before its floor, (q * mult + bias) / 2^S is the exact
  affine map A (u - mu) + beta / s_y + z_y + 1/2 (A, 1/s_y the fx values) within
  (|u - mu| + 2) 2^-(S+1) output steps, S the tensor's shift, wherever the bias is
  not saturated."""
  from fractions import Fraction as F
  rng = np.random.default_rng(8)
  worst = 0.0
  for trial in range(60):
    c = 8
    s_x, s_y = [np.float32(v) for v in 2.0 ** rng.uniform(-8, 3, 2)]
    quant = ops.QuantParams(float(s_x), int(rng.integers(-128, 128)), float(s_y),
                            int(rng.integers(-128, 128)))
    q = reference.prepare_quant("none", quant.s_x, quant.z_x, quant.s_y, quant.z_y)
    t = reference.int_tensor(q, np.float32(1e-5))
    beta = (rng.normal(size=c) * 4).astype(np.float32)
    gamma = np.abs(rng.normal(size=c) * 2.0 ** rng.uniform(-6, 4, c)).astype(np.float32)
    mu = rng.integers(-2**22, 2**22, c)
    var = rng.integers(1, 2**26, c)
    mult, s, bias = reference.int_coefficients(mu, var, beta, gamma, t)
    assert 15 <= s <= 22 and mult.max() <= 2**22 and np.abs(bias).max() <= 2**30
    fxv = lambda a: F(a[1]) * F(2) ** (a[2] - 30) * (-1 if a[0] else 1)
    for ch in range(c):
      if abs(int(bias[ch])) == 2**30:
        continue
      a = fxv(reference.int_gain(int(var[ch]), gamma[ch], t))
      by = fxv(reference.fx_mul(reference.fx_of(beta[ch]), t.inv_sy))
      for qv in (-128, -1, 0, 77, 127):
        u = qv - quant.z_x
        exact = a * (u - F(int(mu[ch]), 2**16)) + by + quant.z_y + F(1, 2)
        got = F(qv * int(mult[ch]) + int(bias[ch]), 2**s)
        bound = (abs(u - F(int(mu[ch]), 2**16)) + 2) / F(2) ** (s + 1)
        assert abs(got - exact) <= bound, (trial, ch, qv)
        worst = max(worst, float(abs(got - exact) / bound))
  assert worst > 0.05  # the bound is not vacuous
