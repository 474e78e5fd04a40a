"""bit-width: the b-bit weight rewrite and the activation grid are what they claim."""

import numpy as np
import pytest

from forge_tflm import tflite_graph as tg
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.experiments import bit_width
from forge_tflm.runtime.segmented import SegmentedModel
from forge_tflm.testing import tiny_models


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory):
  _, r = tiny_models.convert_tiny(tmp_path_factory.mktemp("bits"), ConvertOptions())
  return r.tflite


@pytest.mark.parametrize("bits", [4, 6])
@pytest.mark.parametrize("zero", [-128, -5, 0, 37, 127])
def test_grid_has_2_to_the_b_levels_and_keeps_zero(bits, zero):
  x = np.arange(-128, 128, dtype=np.int8)
  y = bit_width.grid(x, zero, bits)
  levels = np.unique(y)
  assert len(levels) <= 2 ** bits and len(levels) >= 2 ** bits - 1
  assert np.all((levels.astype(int) - zero) % 2 ** (8 - bits) == 0)
  assert bit_width.grid(np.array([zero], np.int8), zero, bits)[0] == zero
  np.testing.assert_array_equal(bit_width.grid(y, zero, bits), y)  # idempotent
  assert np.abs(y.astype(int) - x).max() <= 2 ** (8 - bits)
  np.testing.assert_array_equal(bit_width.grid(x, zero, 8), x)


def test_weights_on_a_b_bit_grid_with_real_values_kept(model_bytes):
  assert bit_width.lower_weight_bits(model_bytes, 8) == model_bytes
  a, b = tg.load_model(model_bytes), tg.load_model(bit_width.lower_weight_bits(model_bytes, 4))
  checked = 0
  for op_a, op_b in zip(a.subgraphs[0].operators, b.subgraphs[0].operators):
    if tg.op_name(a, op_a) not in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
      continue
    wa, wb = a.subgraphs[0].tensors[op_a.inputs[1]], b.subgraphs[0].tensors[op_b.inputs[1]]
    qb = tg.buffer_array(b, wb)
    assert np.abs(qb).max() <= 7
    sa, sb = np.asarray(wa.quantization.scale), np.asarray(wb.quantization.scale)
    np.testing.assert_allclose(sb, sa * 127 / 7, rtol=1e-6)
    axis = wa.quantization.quantizedDimension if len(sa) > 1 else None
    shape = [1] * qb.ndim
    if axis is not None:
      shape[axis] = -1
    real_a = tg.buffer_array(a, wa) * sa.reshape(shape)
    real_b = qb * sb.reshape(shape)
    assert np.all(np.abs(real_a - real_b) <= sb.reshape(shape) / 2 + 1e-9)
    checked += 1
    if len(op_a.inputs) < 3 or op_a.inputs[2] < 0:
      continue  # no bias
    ba, bb = a.subgraphs[0].tensors[op_a.inputs[2]], b.subgraphs[0].tensors[op_b.inputs[2]]
    np.testing.assert_allclose(tg.buffer_array(b, bb) * np.asarray(bb.quantization.scale),
                               tg.buffer_array(a, ba) * np.asarray(ba.quantization.scale),
                               atol=np.max(bb.quantization.scale))
  assert checked >= 5


def test_activation_fake_quant_puts_every_tensor_on_the_grid(model_bytes):
  data, host = bit_width.fake_quant_activations(model_bytes, 8)
  assert data == model_bytes and host == {}
  data, host = bit_width.fake_quant_activations(model_bytes, 4)
  seen = []

  def checking(x, op):
    y = host[bit_width.FAKE_QUANT](x, op)
    seen.append(y)
    return y

  seg = SegmentedModel(data, host_kernels={bit_width.FAKE_QUANT: checking})
  plain = SegmentedModel(model_bytes)
  x = plain.quantize_input(tiny_models.random_images(4, seed=1).astype(np.float32) / 255)
  out = seg.run(x, mode="adapt")
  n_ops = len(tg.load_model(model_bytes).subgraphs[0].operators)
  assert len(seen) == n_ops + 1  # after every operator, and on the input
  assert np.all(np.isin(out, np.unique(seen[-1])))
  assert not np.array_equal(out, plain.run(x, mode="adapt"))
