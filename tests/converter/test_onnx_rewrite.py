"""converter/onnx_rewrite.py on hand-made graphs (folded first, as the front end does):
the shortcut rewrite is exact and only takes the pattern it knows."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from forge_tflm.converter import onnx_fold, onnx_rewrite
from tests.converter.onnx_models import graph_model, run_graph


def _shortcut_model(pad_value=0.0, pads=(0, 2, 0, 0, 0, 2, 0, 0)):
  """x[:, :, ::2, ::2] as PyTorch exports it (two Slices, run-time int64 bounds from
  Shape), then a channel Pad."""
  big = np.array([np.iinfo(np.int64).max], np.int64)
  nodes = [
      helper.make_node("Shape", ["x"], ["shape"]),
      helper.make_node("Gather", ["shape", "two"], ["h"], axis=0),
      helper.make_node("Unsqueeze", ["h", "zero"], ["h1"]),
      helper.make_node("Slice", ["x", "zero", "big", "two1", "two1"], ["s1"]),
      helper.make_node("Slice", ["s1", "zero", "big", "three1", "two1"], ["s2"]),
      helper.make_node("Pad", ["s2", "pads", "value"], ["p"], mode="constant"),
      helper.make_node("Relu", ["p"], ["y"]),
      helper.make_node("Mul", ["h1", "h1"], ["unused_h2"]),
  ]
  inits = {"two": np.array(2, np.int64), "zero": np.array([0], np.int64), "big": big,
           "two1": np.array([2], np.int64), "three1": np.array([3], np.int64),
           "pads": np.array(pads, np.int64), "value": np.array(pad_value, np.float32)}
  c_out = 4 + pads[1] + pads[5]
  return graph_model(nodes, inits, (1, c_out, 4 + pads[2] + pads[6], 4 + pads[3] + pads[7]))


def test_subsample_pad_becomes_an_exact_strided_1x1_conv():
  m, _ = onnx_fold.fold_constants(_shortcut_model())
  assert [n.op_type for n in m.graph.node] == ["Slice", "Slice", "Pad", "Relu"]
  rewritten, n = onnx_rewrite.subsample_pad_to_conv(m)
  assert n == 1 and [x.op_type for x in rewritten.graph.node] == ["Conv", "Relu"]
  conv = rewritten.graph.node[0]
  assert [a.ints for a in conv.attribute if a.name == "strides"] == [[2, 2]]
  x = np.random.default_rng(1).normal(size=(1, 4, 8, 8)).astype(np.float32)
  np.testing.assert_array_equal(run_graph(rewritten, x), run_graph(_shortcut_model(), x))


@pytest.mark.parametrize("kind", ["nonzero_value", "spatial_pad"])
def test_other_pads_are_left_alone(kind):
  src = (_shortcut_model(pad_value=1.0) if kind == "nonzero_value"
         else _shortcut_model(pads=(0, 2, 1, 0, 0, 2, 1, 0)))
  m, _ = onnx_fold.fold_constants(src)
  rewritten, n = onnx_rewrite.subsample_pad_to_conv(m)
  assert n == 0 and [x.op_type for x in rewritten.graph.node] == ["Slice", "Slice", "Pad",
                                                                   "Relu"]


_MEAN = np.array([0.49, 0.48, 0.45], np.float32).reshape(1, 3, 1, 1)
_STD = np.array([0.25, 0.24, 0.26], np.float32).reshape(1, 3, 1, 1)


def _normalized_conv(norm: str):
  """(x / 255 - mean) / std (or a variant) in the model, then Conv -> BN."""
  rng = np.random.default_rng(2)
  inits = {"k255": np.array(255.0, np.float32), "mean": _MEAN, "std": _STD,
           "full": rng.uniform(0.5, 1.5, (1, 3, 8, 8)).astype(np.float32),
           "w": rng.normal(size=(4, 3, 3, 3)).astype(np.float32),
           **{f"bn_{k}": np.ones(4, np.float32) for k in "sbmv"}}
  chain = {
      "mean_std": [("Div", "k255"), ("Sub", "mean"), ("Div", "std")],
      "scalar_only": [("Div", "k255")],
      "not_per_channel": [("Div", "k255"), ("Mul", "full")],
  }[norm]
  nodes, x = [], "x"
  for i, (op, const) in enumerate(chain):
    nodes.append(helper.make_node(op, [x, const], [f"n{i}"]))
    x = f"n{i}"
  nodes += [helper.make_node("Conv", [x, "w"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
            helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"],
                             ["y"])]
  return graph_model(nodes, inits, (1, 4, 8, 8), in_shape=(1, 3, 8, 8))


def test_input_normalization_becomes_one_depthwise_conv():
  m = _normalized_conv("mean_std")
  rewritten, n = onnx_rewrite.input_affine_to_depthwise(m)
  assert n == 3
  assert [x.op_type for x in rewritten.graph.node] == ["Conv", "Conv",
                                                       "BatchNormalization"]
  dw = rewritten.graph.node[0]
  assert onnx_rewrite.node_attr(dw, "group") == 3 and dw.input[0] == "x"
  inits = {i.name: numpy_helper.to_array(i) for i in rewritten.graph.initializer}
  np.testing.assert_allclose(inits[dw.input[1]].reshape(3), 1 / (255 * _STD.reshape(3)),
                             rtol=1e-6)
  np.testing.assert_allclose(inits[dw.input[2]], -(_MEAN / _STD).reshape(3), rtol=1e-6)
  x = np.random.default_rng(3).uniform(0, 255, (1, 3, 8, 8)).astype(np.float32)
  np.testing.assert_allclose(run_graph(rewritten, x), run_graph(m, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm", ["scalar_only", "not_per_channel"])
def test_other_input_arithmetic_is_left_alone(norm):
  m = _normalized_conv(norm)
  rewritten, n = onnx_rewrite.input_affine_to_depthwise(m)
  assert n == 0 and [x.op_type for x in rewritten.graph.node] == \
      [x.op_type for x in m.graph.node]
