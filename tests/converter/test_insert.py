"""insert pass on a hand-built model: the graph edit, tensors, options, op indices."""

import numpy as np
import pytest

from forge_tflm import tflite_graph as tg
from forge_tflm.converter.insert import fused_activation, insert_recalib
from forge_tflm.ops import RecalibOptions, decode_options
from forge_tflm.runtime.segmented import SegmentedModel
from tests.converter import handmade


def _options(site, activation):
  return RecalibOptions(window=64, eps=site.eps, activation=activation)


def test_insert_rewires_one_site_and_leaves_the_rest():
  model, w = handmade.two_convs(activations=("relu6", "none"))
  sg = model.subgraphs[0]
  t0 = sg.operators[0].outputs[0]
  t0_quant = tg.per_tensor_quant(sg.tensors[t0])
  site = handmade.site_for(w[0], "bn0", "relu6")
  asked = []

  def preact(s):
    asked.append(s.name)
    return 0.07, 3, 0.001

  inserted = insert_recalib(model, [site], {"bn0": 0}, _options, preact)
  assert asked == ["bn0"]
  names = [tg.op_name(model, op) for op in sg.operators]
  assert names == ["CONV_2D", tg.FORGE_RECALIB, "CONV_2D"]
  conv, forge = sg.operators[0], sg.operators[1]
  assert fused_activation(conv) == "none"  # The activation moved into FORGE.
  pre = conv.outputs[0]
  assert forge.inputs[0] == pre and forge.outputs == [t0]
  assert tg.per_tensor_quant(sg.tensors[pre]) == (0.07, 3)
  assert tg.per_tensor_quant(sg.tensors[t0]) == t0_quant  # Consumers see no change.
  np.testing.assert_array_equal(tg.buffer_array(model, sg.tensors[forge.inputs[1]]),
                                site.beta)
  np.testing.assert_array_equal(tg.buffer_array(model, sg.tensors[forge.inputs[2]]),
                                site.gamma_abs)
  opts = decode_options(bytes(np.asarray(forge.customOptions, np.uint8)))
  assert opts == RecalibOptions(window=64, eps=1e-3, activation="relu6")
  (rec,) = inserted
  assert rec.op_index == 1 and rec.options == opts and rec.saturated_fraction == 0.001
  assert (rec.input_quant, rec.output_quant) == ((0.07, 3), t0_quant)
  assert rec.output_tensor == tg.tensor_name(sg.tensors[t0])
  # The new tensors are named by the site (flash: a conv output's name from TF can
  # run to 150+ characters, and the pre-activation's used to repeat it).
  assert [tg.tensor_name(sg.tensors[t]) for t in forge.inputs] == \
      ["bn0/forge_preact", "bn0/forge_beta", "bn0/forge_gamma_abs"]


def test_op_indices_count_earlier_insertions_and_the_model_runs():
  model, w = handmade.two_convs(activations=("none", "relu"))
  sites = [handmade.site_for(w[0], "bn0"), handmade.site_for(w[1], "bn1", "relu")]
  inserted = insert_recalib(model, sites, {"bn0": 0, "bn1": 1}, _options,
                            lambda s: (0.05, 0, 0.0))
  assert [s.op_index for s in inserted] == [1, 3]
  # No activation: the pre-activation tensor keeps the conv's output quantization.
  assert inserted[0].input_quant == inserted[0].output_quant
  runtime = SegmentedModel(tg.save_model(model))
  assert [n.op_index for n in runtime.nodes] == [1, 3]
  x = np.random.default_rng(0).integers(-128, 128, (2, 4, 4, 2)).astype(np.int8)
  y = runtime.run(x, mode="frozen")
  assert y.shape == (2, 4, 4, 3) and y.dtype == np.int8
  assert y.min() >= inserted[1].output_quant[1]  # ReLU, now inside FORGE.


def test_without_a_new_grid_the_conv_keeps_its_activation_and_output():
  """preact -> None (targets measured on the conv's own output): the conv keeps its
  fused activation and T's quantization, and FORGE re-applies the activation."""
  model, w = handmade.two_convs(activations=("relu6", "none"))
  sg = model.subgraphs[0]
  t0 = sg.operators[0].outputs[0]
  t0_quant = tg.per_tensor_quant(sg.tensors[t0])
  (rec,) = insert_recalib(model, [handmade.site_for(w[0], "bn0", "relu6")], {"bn0": 0},
                          _options, lambda s: None)
  conv, forge = sg.operators[0], sg.operators[1]
  assert fused_activation(conv) == "relu6"
  assert tg.per_tensor_quant(sg.tensors[conv.outputs[0]]) == t0_quant
  assert forge.outputs == [t0] and rec.options.activation == "relu6"
  assert (rec.input_quant, rec.output_quant, rec.saturated_fraction) == \
      (t0_quant, t0_quant, 0.0)


def test_channel_mismatch_is_a_conversion_error():
  from forge_tflm.converter.sites import ConversionError
  model, w = handmade.two_convs(channels=(4, 3))
  site = handmade.site_for(w[1], "bn")  # 3 channels, but placed on conv 0 (4).
  with pytest.raises(ConversionError, match="3 channels"):
    insert_recalib(model, [site], {"bn": 0}, _options, lambda s: (0.05, 0, 0.0))
