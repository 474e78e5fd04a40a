"""Bad input is an error with a message (ValueError), never a crash or a write.

Covers the Python API, the numpy reference and the C core (through the
binding and also calling the raw entry point with arguments the Python layer
would have rejected, so the C core's own validation is exercised).
"""

import dataclasses
import math

import numpy as np
import pytest

from forge_tflm import ops
from forge_tflm.ops import options

needs_core = pytest.mark.skipif(not ops.c_core_available(),
                                reason="C core not built (pip install -e .)")

GOOD_Q = ops.QuantParams(0.05, 0, 0.05, 0)
GOOD_OPTS = ops.RecalibOptions(momentum=0.1)


def _state(c=3):
  return ops.RecalibState(np.zeros(c, np.float32), np.ones(c, np.float32))


@pytest.mark.parametrize("kwargs", [
    {}, {"momentum": 0.1, "window": 4}, {"momentum": -0.1}, {"momentum": 1.01},
    {"momentum": math.nan}, {"momentum": math.inf}, {"momentum": "0.1"},
    {"momentum": True}, {"window": 0}, {"window": -3}, {"window": 2**31},
    {"window": 2.0}, {"window": True},
    {"momentum": 0.1, "eps": 0.0}, {"momentum": 0.1, "eps": -1e-5},
    {"momentum": 0.1, "eps": math.nan}, {"momentum": 0.1, "eps": math.inf},
    {"momentum": 0.1, "eps": 1e-50}, {"momentum": 0.1, "eps": 3.5e38},
    {"momentum": 0.1, "activation": "tanh"}, {"momentum": 0.1, "variance": "ema"},
])
def test_bad_options_raise(kwargs):
  with pytest.raises(ValueError):
    ops.RecalibOptions(**kwargs)


@pytest.mark.parametrize("data", [
    b"", b"\x00", b"\x01\x02\x03", b"\xff" * 16, b"\x00" * 600,
])
def test_decode_garbage_raises_value_error(data):
  with pytest.raises(ValueError):
    ops.decode_options(data)


def test_decode_every_truncation_and_bit_flip_is_clean():
  good = ops.encode_options(ops.RecalibOptions(window=8, activation="relu6"))
  for n in range(len(good)):
    with pytest.raises(ValueError):
      ops.decode_options(good[:n])
  for bit in range(8 * len(good)):
    buf = bytearray(good)
    buf[bit // 8] ^= 1 << (bit % 8)
    try:
      ops.decode_options(bytes(buf))
    except ValueError:
      pass


@pytest.mark.parametrize("beta,gamma", [
    ([np.nan, 0, 0], [1, 1, 1]), ([0, np.inf, 0], [1, 1, 1]),
    ([0, 0, 0], [1, -1, 1]), ([0, 0, 0], [1, 1, np.nan]),
    ([2.0**41, 0, 0], [1, 1, 1]), ([0, 0, 0], [2.0**41, 1, 1]),
])
def test_bad_targets_raise(beta, gamma):
  with pytest.raises(ValueError):
    ops.RecalibState(np.array(beta, np.float32), np.array(gamma, np.float32))


@pytest.mark.parametrize("quant", [
    ops.QuantParams(0.0, 0, 0.05, 0), ops.QuantParams(0.05, 0, 0.0, 0),
    ops.QuantParams(-0.05, 0, 0.05, 0), ops.QuantParams(math.nan, 0, 0.05, 0),
    ops.QuantParams(0.05, 0, math.inf, 0), ops.QuantParams(1e-13, 0, 0.05, 0),
    ops.QuantParams(0.05, 0, 2e12, 0), ops.QuantParams(0.05, -129, 0.05, 0),
    ops.QuantParams(0.05, 0, 0.05, 128),
])
@pytest.mark.parametrize("impl", ["reference", "c"])
def test_bad_quantization_raises(quant, impl):
  if impl == "c" and not ops.c_core_available():
    pytest.skip("C core not built")
  fn = ops.forge_recalib_reference if impl == "reference" else ops.forge_recalib_c
  x = np.zeros((1, 2, 2, 3), np.int8)
  state = _state()
  before = state.data.copy()
  with pytest.raises(ValueError):
    fn(x, state, GOOD_OPTS, quant)
  np.testing.assert_array_equal(state.data, before)


def test_per_channel_quantization_is_refused_where_made():
  with pytest.raises(ValueError, match="per-tensor"):
    ops.QuantParams(np.array([0.05, 0.1, 0.2], np.float32), 0, 0.05, 0)


@pytest.mark.parametrize("impl", ["reference", "c"])
@pytest.mark.parametrize("x", [
    np.zeros((1, 2, 2, 3), np.float32), np.zeros((1, 2, 2, 3), np.uint8),
    np.zeros((1, 2, 2, 3), np.int16), np.zeros((1, 2, 2, 4), np.int8),
    np.zeros((3,), np.int8), np.zeros((0, 2, 2, 3), np.int8),
])
def test_bad_inputs_raise(impl, x):
  if impl == "c" and not ops.c_core_available():
    pytest.skip("C core not built")
  fn = ops.forge_recalib_reference if impl == "reference" else ops.forge_recalib_c
  with pytest.raises(ValueError):
    fn(x, _state(), GOOD_OPTS, GOOD_Q)


@needs_core
def test_c_binding_rejects_bad_buffers():
  state = _state()
  x = np.zeros((1, 2, 2, 3), np.int8)
  with pytest.raises(ValueError):  # Non-contiguous x.
    ops.forge_recalib_c(np.zeros((1, 2, 4, 3), np.int8)[:, :, ::2], state,
                        GOOD_OPTS, GOOD_Q)
  with pytest.raises(ValueError):  # out of another shape.
    ops.forge_recalib_c(x, state, GOOD_OPTS, GOOD_Q, out=np.zeros(5, np.int8))
  with pytest.raises(ValueError):  # out of another dtype.
    ops.forge_recalib_c(x, state, GOOD_OPTS, GOOD_Q, out=np.zeros(x.shape, np.uint8))
  with pytest.raises(ValueError):  # Read-only out.
    ro = np.zeros_like(x)
    ro.flags.writeable = False
    ops.forge_recalib_c(x, state, GOOD_OPTS, GOOD_Q, out=ro)
  with pytest.raises(ValueError):  # out partially overlapping x.
    big = np.zeros(2 * x.size, np.int8)
    ops.forge_recalib_c(big[:x.size].reshape(x.shape), state, GOOD_OPTS, GOOD_Q,
                        out=big[1:x.size + 1].reshape(x.shape))
  with pytest.raises(ValueError):
    ops.forge_recalib_c(x, state, GOOD_OPTS, GOOD_Q, mode="train")
  with pytest.raises(ValueError):
    ops.forge_recalib_c(x, state, GOOD_OPTS, GOOD_Q, path="simd")
  state.data = state.data.astype(np.float64)  # Wrong state dtype.
  with pytest.raises(ValueError):
    ops.forge_recalib_c(x, state, GOOD_OPTS, GOOD_Q)


@needs_core
@pytest.mark.parametrize("overrides", [
    {"window": None, "momentum": None}, {"momentum": -0.1}, {"momentum": 1.5},
    {"momentum": math.nan}, {"window": 0, "momentum": None},
    {"eps": 0.0}, {"eps": -1.0}, {"eps": math.nan}, {"eps": math.inf},
    {"activation": "tanh"}, {"activation": 3}, {"variance": "ema"},
    {"s_x": 0.0}, {"s_y": math.nan}, {"s_y": -1.0}, {"z_x": 128}, {"z_y": -200},
    {"mode": len(ops.MODES)}, {"mode": -1}, {"path": 3}, {"variant": 3},
    {"x_shape": (0, 2, 2, 3)}, {"x_shape": (2, 0, 2, 3)}, {"x_shape": (3,)},
    {"x_shape": (1 << 12, 1025, 1, 3)},  # M > 2^22: refused before any access.
    {"x_shape": (2, 2, 2, 4)}, {"c": 70000}, {"c": 0},  # Channels vs the node's.
])
def test_c_core_validation_raises_and_writes_nothing(overrides):
  """The raw binding (options given as a plain object, codes as integers), so the
  C core's own validation is reached with values RecalibOptions would refuse."""
  from types import SimpleNamespace
  core = options.core()
  fields = dataclasses.asdict(ops.RecalibOptions(momentum=0.1))
  args = dict(fields, s_x=0.05, z_x=0, s_y=0.05, z_y=0, mode=0, path=0, variant=0, c=3,
              x_shape=(2, 2, 2, 3))
  args.update(overrides)
  c = args["c"]
  beta, gamma = np.zeros(c, np.float32), np.ones(c, np.float32)
  state = np.concatenate([beta, gamma * gamma])
  x = np.zeros(args["x_shape"], np.int8)
  y = np.full(x.shape, 7, np.int8)
  before = state.copy()
  opts = SimpleNamespace(**{k: args[k] for k in fields})
  with pytest.raises(ValueError, match=r"\S"):
    node = core.Prepared(opts, args["s_x"], args["z_x"], args["s_y"], args["z_y"],
                         beta, gamma)
    node.run(x, y, state, args["mode"], args["path"], args["variant"])
  np.testing.assert_array_equal(y, 7)
  np.testing.assert_array_equal(state, before)


@needs_core
def test_c_core_valid_raw_call_succeeds():
  core = options.core()
  x = np.zeros((2, 2, 2, 3), np.int8)
  y = np.empty_like(x)
  beta, gamma = np.zeros(3, np.float32), np.ones(3, np.float32)
  state = np.concatenate([beta, gamma])
  node = core.Prepared(ops.RecalibOptions(momentum=0.1), 0.05, 0, 0.05, 0, beta, gamma)
  node.run(x, y, state, 0)
  assert node.channels == 3
  assert core.scratch_bytes(16) == (24 * 16, 280 * 16)
  with pytest.raises(ValueError):
    core.state_reset(beta, np.array([1, -1, 1], np.float32), state)


_RUN_AFTER_FAILED_INIT = """
import numpy as np
from forge_tflm.ops import RecalibOptions, core
P = core().Prepared
p = P.__new__(P)
try:  # Zero channels: init refuses them, leaving the object unprepared (C = 0).
  p.__init__(RecalibOptions(momentum=0.1), 0.1, 0, 0.1, 0, np.zeros(0, np.float32),
             np.zeros(0, np.float32))
except ValueError:
  pass
try:
  x = np.zeros((1, 4, 0), np.int8)
  p.run(x, x.copy(), np.zeros(0, np.float32), 0)
except ValueError as e:
  print(e)
"""


def test_a_call_on_a_failed_prepare_raises_instead_of_sigfpe():
  """Issue 34: a call on a Prepared whose init failed (C = 0) raises a one-line
  ValueError instead of reaching the core (it once divided by C there, SIGFPE)."""
  import subprocess
  import sys

  result = subprocess.run([sys.executable, "-c", _RUN_AFTER_FAILED_INIT],
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result
  assert result.stdout.strip() == "Prepared is not initialized", result
