"""TFLM's requantization and FULLY_CONNECTED in numpy (reference mode = device numerics)."""

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from forge_tflm import tflite_graph as tg
from forge_tflm.runtime import tflm_kernels as tk
from forge_tflm.runtime.segmented import SegmentedModel

_MIN, _MAX = -(1 << 31), (1 << 31) - 1


def _high_mul(a: int, b: int) -> int:
  """gemmlowp::SaturatingRoundingDoublingHighMul with Python integers."""
  if a == b == _MIN:
    return _MAX
  ab = a * b
  num = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
  q = abs(num) >> 31
  return q if num >= 0 else -q  # C++ division truncates toward zero.


def _divide_by_pot(x: int, e: int) -> int:
  mask = (1 << e) - 1
  threshold = (mask >> 1) + (1 if x < 0 else 0)
  return (x >> e) + (1 if (x & mask) > threshold else 0)


def test_requantization_equals_gemmlowp_definitions():
  rng = np.random.default_rng(0)
  acc = np.concatenate([rng.integers(-(1 << 24), 1 << 24, 4000),
                        [0, 1, -1, _MIN, _MAX, 2048 * 41 + 1024, -(2048 * 41 + 1024)]])
  for mult, shift in [(1 << 30, -11), (1518500250, -8), (_MAX, 0), (1 << 30, 1),
                      (1234567890, -20)]:
    left, right = max(shift, 0), max(-shift, 0)
    ok = acc[np.abs(acc.astype(object) * (1 << left)) <= _MAX]  # C++: no overflow.
    got = tk.multiply_by_quantized_multiplier(ok, mult, shift)
    want = [_divide_by_pot(_high_mul(int(a) << left, mult), right) for a in ok]
    np.testing.assert_array_equal(got, want)


def test_double_rounding_breaks_ties_away_from_zero_where_single_rounds_up():
  # M = 0.5 (2^30), right shift 11: y = acc / 2^12. At -20.5 exactly TFLM gives -21,
  # LiteRT's single rounding -20 (values just past a half that the first rounding
  # moves onto it, like ResNet-20's -20.50047, end up the same way).
  acc = np.array([-(41 << 11) - 1, (41 << 11) + 1, -(41 << 11), 41 << 11])
  double = tk.multiply_by_quantized_multiplier(acc, 1 << 30, -11)
  single = (acc * (1 << 30) + (1 << 41)) >> 42
  assert double.tolist() == [-21, 21, -21, 21]
  assert single.tolist() == [-21, 21, -20, 21]


def test_quantize_multiplier_round_trips_the_scale():
  for scale in (0.0004, 0.5, 0.999999, 1.5, 3e-7):
    m, shift = tk.quantize_multiplier(scale)
    assert (1 << 30) <= m < (1 << 31)
    assert m * 2.0 ** (shift - 31) == pytest.approx(scale, rel=1e-9)
  assert tk.quantize_multiplier(0.0) == (0, 0)


def test_reference_mode_runs_fully_connected_with_tflm_arithmetic(tmp_path):
  """Tiny ResNet: every FC output equals TFLM's formula recomputed here, and LiteRT's
  BUILTIN_REF differs from it by at most one LSB (its single rounding)."""
  from forge_tflm.artifact import InputContract
  from forge_tflm.converter.options import ConvertOptions
  from forge_tflm.testing import tiny_models
  _, result = tiny_models.convert_tiny(tmp_path, ConvertOptions(sites="none"))
  plain = result.plain_tflite
  model = tg.load_model(plain)
  fc_ops = [op for op in model.subgraphs[0].operators
            if tg.op_name(model, op) == "FULLY_CONNECTED"]
  assert len(fc_ops) == 1
  seg = SegmentedModel(plain, "reference")
  assert any(step[0] == "host" for step in seg._steps)  # The FC runs on the host.
  x = seg.quantize_input(InputContract().to_float(tiny_models.random_images(64, seed=5)))
  ours = seg.run(x)
  it = Interpreter(model_content=plain, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
  inp, out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
  it.resize_tensor_input(inp, list(x.shape))
  it.allocate_tensors()
  it.set_tensor(inp, x)
  it.invoke()
  litert = it.get_tensor(out)
  assert np.abs(ours.astype(int) - litert.astype(int)).max() <= 1
  # Optimized mode keeps LiteRT's kernels (no host FC step).
  assert all(step[0] != "host" for step in SegmentedModel(plain, "optimized")._steps)
