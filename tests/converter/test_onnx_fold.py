"""converter/onnx_fold.py on hand-made graphs: everything the fixed input shape
determines is folded (also when a fold is what fixes a shape further on), sites stay,
outputs are unchanged, a symbolic batch is pinned to 1."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from forge_tflm.converter import onnx_fold
from tests.converter.onnx_models import graph_model, run_graph

_BN = {f"bn_{k}": np.ones(4, np.float32) for k in "sbmv"}
_W = {"w": np.eye(4, dtype=np.float32).reshape(4, 4, 1, 1)}
_SITE = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]),
         helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"],
                          ["b"])]


def _x(n=1):
  return np.random.default_rng(0).normal(size=(n, 4, 8, 8)).astype(np.float32)


def _flatten(src: str, out: str) -> list:
  """`out = src.view(src.size(0), -1)` as PyTorch exports it."""
  return [helper.make_node("Shape", [src], [f"{out}_shape"]),
          helper.make_node("Gather", [f"{out}_shape", "i0"], [f"{out}_n"], axis=0),
          helper.make_node("Unsqueeze", [f"{out}_n", "axes0"], [f"{out}_n1"]),
          helper.make_node("Concat", [f"{out}_n1", "minus1"], [f"{out}_target"], axis=0),
          helper.make_node("Reshape", [src, f"{out}_target"], [out])]


_FLATTEN_INITS = {"i0": np.array(0, np.int64), "axes0": np.array([0], np.int64),
                  "minus1": np.array([-1], np.int64)}


def test_fold_constants_evaluates_shape_arithmetic_and_keeps_sites():
  nodes = [
      helper.make_node("Identity", ["w0"], ["w"]), *_SITE,
      helper.make_node("Shape", ["b"], ["sh"]),
      helper.make_node("Cast", ["sh"], ["shf"], to=TensorProto.FLOAT),
      helper.make_node("ReduceSum", ["shf"], ["n"], keepdims=0),
      helper.make_node("Add", ["b", "n"], ["y"]),
  ]
  m = graph_model(nodes, {"w0": _W["w"], **_BN}, (1, 4, 8, 8))
  folded, n = onnx_fold.fold_constants(m)
  assert n == 4  # Identity, Shape, Cast, ReduceSum
  assert [x.op_type for x in folded.graph.node] == ["Conv", "BatchNormalization", "Add"]
  np.testing.assert_array_equal(run_graph(folded, _x()), run_graph(m, _x()))


def _runtime_pad_then_view():
  """The akamaster ResNet's tail in small: a channel Pad whose pads PyTorch computes at
  run time from the input's shape (through ConstantOfShape and a Transpose, which shape
  inference cannot see through, so the Pad's output shape stays unknown), then
  `view(size(0), -1)`. Only once the pads are folded does the flatten's Shape fold."""
  nodes = [
      *_SITE,
      helper.make_node("Shape", ["b"], ["bs"]),
      helper.make_node("Gather", ["bs", "i1"], ["ch"], axis=0),        # 4 channels
      helper.make_node("Div", ["ch", "two"], ["half"]),                 # pad 2 + 2
      helper.make_node("Unsqueeze", ["half", "axes0"], ["half1"]),
      helper.make_node("ConstantOfShape", ["one1"], ["zero1"],
                       value=numpy_helper.from_array(np.array([0], np.int64))),
      helper.make_node("Concat", ["zero1", "half1", "zero1", "zero1", "zero1", "half1",
                                  "zero1", "zero1"], ["pads_flat"], axis=0),
      helper.make_node("Reshape", ["pads_flat", "two_by_four"], ["pads_2x4"]),
      helper.make_node("Transpose", ["pads_2x4"], ["pads_4x2"], perm=[1, 0]),
      helper.make_node("Transpose", ["pads_4x2"], ["pads_back"], perm=[1, 0]),
      helper.make_node("Reshape", ["pads_back", "eight"], ["pads"]),
      helper.make_node("Pad", ["b", "pads"], ["p"], mode="constant"),
      *_flatten("p", "y"),
  ]
  inits = {**_W, **_BN, **_FLATTEN_INITS, "i1": np.array(1, np.int64),
           "two": np.array(2, np.int64), "one1": np.array([1], np.int64),
           "two_by_four": np.array([2, 4], np.int64), "eight": np.array([8], np.int64)}
  return graph_model(nodes, inits, (1, 8 * 8 * 8))


def test_folds_until_nothing_changes():
  m = _runtime_pad_then_view()
  assert "p" not in onnx_fold.static_shapes(m)  # What hid the flatten's Shape.
  folded, _ = onnx_fold.fold_constants(m)
  assert [x.op_type for x in folded.graph.node] == ["Conv", "BatchNormalization", "Pad",
                                                    "Reshape"]
  reshape = folded.graph.node[-1]
  target = {i.name: numpy_helper.to_array(i) for i in folded.graph.initializer}
  assert target[reshape.input[1]].tolist() == [1, -1]
  np.testing.assert_array_equal(run_graph(folded, _x()), run_graph(m, _x()))


def test_symbolic_batch_is_pinned_to_one_then_folded():
  nodes = [*_SITE, *_flatten("b", "y")]
  m = graph_model(nodes, {**_W, **_BN, **_FLATTEN_INITS}, ("batch", 256),
             in_shape=("batch", 4, 8, 8))
  unpinned, _ = onnx_fold.fold_constants(m)
  assert "Shape" in [x.op_type for x in unpinned.graph.node]  # Unknown until pinned.
  pinned, changed = onnx_fold.pin_batch(m)
  assert changed and onnx_fold.static_shapes(pinned)["x"] == (1, 4, 8, 8)
  assert [d.dim_value for d in pinned.graph.output[0].type.tensor_type.shape.dim] == \
      [1, 256]
  folded, _ = onnx_fold.fold_constants(pinned)
  assert [x.op_type for x in folded.graph.node] == ["Conv", "BatchNormalization",
                                                    "Reshape"]
  np.testing.assert_array_equal(run_graph(folded, _x()), run_graph(m, _x()))
  assert not onnx_fold.pin_batch(folded)[1]  # A static batch is left alone.


def test_size_and_constant_of_shape_fold_and_dead_nodes_go():
  """`x.numel()` (Size) and `x.new_zeros(x.shape)` (ConstantOfShape of Shape) fold;
  a node whose output nothing reads is dropped even if it needs an image."""
  nodes = [
      *_SITE,
      helper.make_node("Size", ["b"], ["numel"]),
      helper.make_node("Cast", ["numel"], ["numel_f"], to=TensorProto.FLOAT),
      helper.make_node("Shape", ["b"], ["bs"]),
      helper.make_node("ConstantOfShape", ["bs"], ["zeros"],
                       value=numpy_helper.from_array(np.array([1.0], np.float32))),
      helper.make_node("Mul", ["zeros", "numel_f"], ["scaled"]),
      helper.make_node("Add", ["b", "scaled"], ["y"]),
      helper.make_node("Relu", ["b"], ["unused"]),
  ]
  m = graph_model(nodes, {**_W, **_BN}, (1, 4, 8, 8))
  folded, _ = onnx_fold.fold_constants(m)
  assert [x.op_type for x in folded.graph.node] == ["Conv", "BatchNormalization", "Add"]
  add_const = {i.name: numpy_helper.to_array(i) for i in folded.graph.initializer}
  assert np.all(add_const[folded.graph.node[-1].input[1]] == 256.0)
  np.testing.assert_array_equal(run_graph(folded, _x()), run_graph(m, _x()))
