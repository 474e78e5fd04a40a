"""One vocabulary: the Python option type, the C core's struct and enums agree."""

import dataclasses

import numpy as np
import pytest

from forge_tflm import ops
from forge_tflm.ops import options
from forge_tflm.testing import options_crosscheck

core = options.core()  # The compiled C core module.


def test_option_fields_are_the_c_structs():
  assert tuple(f.name for f in dataclasses.fields(ops.RecalibOptions)) == \
      tuple(name for name, _ in core.OPTION_FIELDS)


def test_enum_names_and_codes_come_from_the_core():
  assert tuple(ops.ACTIVATIONS) == core.ACTIVATIONS
  assert [a.code for a in ops.ACTIVATIONS.values()] == list(range(len(core.ACTIVATIONS)))
  assert options.VARIANCES == core.VARIANCES and options.MODES == core.MODES
  assert options.MAX_OPTIONS_BYTES == core.MAX_OPTIONS_BYTES


def test_activation_semantics():
  assert (ops.ACTIVATIONS["relu6"].low, ops.ACTIVATIONS["relu6"].high) == (0.0, 6.0)
  for act in ops.ACTIVATIONS.values():
    assert options.activation_from_tflite(act.tflite_code) is act
  assert options.activation_from_tflite(99) is None


def test_replace_keeps_momentum_and_window_exclusive():
  w = ops.RecalibOptions(window=640, variance="batch")
  m = w.replace(momentum=0.2)
  assert (m.momentum, m.window, m.variance) == (pytest.approx(0.2), None, "batch")
  assert m.replace(window=32) == ops.RecalibOptions(window=32, variance="batch")
  assert w.replace(momentum=None, eps=None) == w  # None = keep.
  with pytest.raises(ValueError, match="at most one"):
    w.replace(momentum=0.1, window=3)
  with pytest.raises(ValueError, match="momentum"):
    w.replace(momentum=1.5)


def test_momentum_rule_is_float32_min_of_one():
  assert ops.RecalibOptions(window=640).momentum_at(64) == np.float32(64) / np.float32(640)
  assert ops.RecalibOptions(window=3).momentum_at(64) == np.float32(1.0)
  assert ops.RecalibOptions(momentum=0.25).momentum_at(7) == np.float32(0.25)


@pytest.mark.parametrize("opts", [
    ops.RecalibOptions(window=640), ops.RecalibOptions(momentum=0.1, eps=1e-3,
                                                       activation="relu6",
                                                       variance="batch")])
def test_json_and_flexbuffer_round_trip(opts):
  assert ops.RecalibOptions.from_json(opts.to_json()) == opts
  assert ops.decode_options(ops.encode_options(opts)) == opts
  with pytest.raises(ValueError, match="unknown FORGE option"):
    ops.RecalibOptions.from_json({**opts.to_json(), "clip": 1.0})


def test_the_binding_reads_options_by_field():
  """The prepared node gets each field through FORGE_RECALIB_OPTION_FIELDS: a
  different activation shows in the prepared clamp."""
  beta, gamma = np.zeros(2, np.float32), np.ones(2, np.float32)
  q = ops.QuantParams(0.05, 0, 0.05, 0)
  relu6 = ops.RecalibOp(ops.RecalibOptions(window=8, activation="relu6"), q, beta, gamma)
  none = ops.RecalibOp(ops.RecalibOptions(window=8), q, beta, gamma)
  assert relu6.prepared_quant[3:] == (0, 120)  # qmin = z_y, qmax = round(6 / 0.05).
  assert none.prepared_quant[3:] == (-128, 127)


def test_prepared_op_equals_one_shot_and_reference_over_batches():
  rng = np.random.default_rng(0)
  beta = rng.normal(0, 0.5, 8).astype(np.float32)
  gamma = rng.uniform(0.5, 2, 8).astype(np.float32)
  opts = ops.RecalibOptions(window=16, activation="relu")
  q = ops.QuantParams(0.04, -5, 0.03, -128)
  op = ops.RecalibOp(opts, q, beta, gamma)
  ref_state, c_state = ops.RecalibState(beta, gamma), ops.RecalibState(beta, gamma)
  for n in (1, 4, 16):
    x = rng.integers(-128, 128, (n, 3, 3, 8)).astype(np.int8)
    y = op(x)
    np.testing.assert_array_equal(y, ops.forge_recalib_reference(x, ref_state, opts, q))
    np.testing.assert_array_equal(y, ops.forge_recalib_c(x, c_state, opts, q))
    assert op.state.data.tobytes() == ref_state.data.tobytes() == c_state.data.tobytes()
  op.reset()
  np.testing.assert_array_equal(op.state.mu, beta)


@pytest.mark.parametrize("what", sorted(options_crosscheck.REGRESSIONS))
def test_decoder_refuses_what_the_cpp_parser_refuses(what):
  """Issue 34: offsets past the buffer's end (which Python's flexbuffers reader
  wrapped back onto the original bytes) and a misaligned map decoded to valid
  options here while the device's parser refused them; the message is the C++
  parser's (custom_ops/forge_recalib/src/forge_recalib_options.cc)."""
  cpp_message = {"key offset": "verification failed",
                 "string value offset": "verification failed",
                 "key vector offset": "bad key vector", "map offset": "bad map offset",
                 "root width": "bad root width", "misaligned map": "bad map layout"}[what]
  with pytest.raises(ValueError, match=f"malformed flexbuffer options: {cpp_message}"):
    ops.decode_options(options_crosscheck.regression_buffer(what))
  unmutated = bytes.fromhex(options_crosscheck.SEED)
  assert ops.decode_options(unmutated) == ops.RecalibOptions(momentum=0.1,
                                                             activation="relu")


def test_one_and_two_byte_floats_read_as_the_cpp_parser_reads_them():
  """flexbuffers' C++ ReadDouble takes 1- and 2-byte floats as int8 / int16; the Python
  library had no such widths and the decoder refused a buffer the device parses
  (options_crosscheck, 1 disagreement in 1,000,000 buffers): momentum a 2-byte indirect
  float 0 here."""
  data = bytes.fromhex(
      "6d6f6d656e74756d006570730061637469766174696f6e00046e6f6e650076617269616e63650007"
      "72756e6e696e670004242933160000000700000001000000040000002b000000acc5273700000000"
      "28000000140e2114142601")
  opts = ops.decode_options(data)
  assert opts.momentum == 0.0 and opts.eps == float(np.float32(1e-5))
