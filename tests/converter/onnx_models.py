"""A small ONNX ResNet built with the onnx helper API (what a PyTorch export gives)."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def tiny_onnx_resnet(path: str, size: int = 16, classes: int = 10, seed: int = 0) -> dict:
  """Writes the model; returns {bn node name: (kind, activation, channels)}."""
  rng = np.random.default_rng(seed)
  inits, nodes, sites = [], [], {}

  def const(name, array):
    inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
    return name

  def conv_bn(name, x, c_in, c_out, k, stride, act, group=1):
    w = rng.normal(0, np.sqrt(2.0 / (k * k * c_in / group)), (c_out, c_in // group, k, k))
    nodes.append(helper.make_node(
        "Conv", [x, const(f"{name}_w", w)], [f"{name}_conv_out"], name=f"{name}_conv",
        kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group))
    gamma = rng.uniform(0.5, 1.5, c_out) * rng.choice([-1, 1], c_out, p=[0.1, 0.9])
    nodes.append(helper.make_node(
        "BatchNormalization",
        [f"{name}_conv_out", const(f"{name}_g", gamma),
         const(f"{name}_b", rng.normal(0, 0.3, c_out)),
         const(f"{name}_m", rng.normal(0, 0.2, c_out)),
         const(f"{name}_v", rng.uniform(0.2, 2.0, c_out))],
        [f"{name}_bn_out"], name=f"{name}_bn", epsilon=1e-5))
    out = f"{name}_bn_out"
    if act == "relu":
      nodes.append(helper.make_node("Relu", [out], [f"{name}_act"], name=f"{name}_relu"))
      out = f"{name}_act"
    elif act == "relu6":
      nodes.append(helper.make_node("Clip", [out, const(f"{name}_lo", 0.0),
                                             const(f"{name}_hi", 6.0)],
                                    [f"{name}_act"], name=f"{name}_relu6"))
      out = f"{name}_act"
    sites[f"{name}_bn"] = ("depthwise" if group > 1 else "conv", act, c_out)
    return out

  x = conv_bn("stem", "input", 3, 8, 3, 1, "relu")
  y = conv_bn("b1", x, 8, 16, 3, 2, "relu")
  y = conv_bn("b2", y, 16, 16, 3, 1, "none")
  s = conv_bn("proj", x, 8, 16, 1, 2, "none")
  nodes.append(helper.make_node("Add", [y, s], ["sum"], name="add"))
  nodes.append(helper.make_node("Relu", ["sum"], ["sum_relu"], name="add_relu"))
  z = conv_bn("dw", "sum_relu", 16, 16, 3, 1, "relu6", group=16)
  nodes.append(helper.make_node("GlobalAveragePool", [z], ["pool"], name="pool"))
  nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"))
  nodes.append(helper.make_node(
      "Gemm", ["flat", const("fc_w", rng.normal(0, 0.3, (classes, 16))),
               const("fc_b", np.zeros(classes))], ["logits"], name="fc", transB=1))
  graph = helper.make_graph(
      nodes, "tiny_resnet",
      [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
      [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])], inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
  model.ir_version = 8
  onnx.checker.check_model(model)
  onnx.save(model, path)
  return sites


def graph_model(nodes, inits, out_shape, in_shape=(1, 4, 8, 8)):
  """A one-input (x), one-output (y) opset-17 model of hand-made nodes."""
  graph = helper.make_graph(
      nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))],
      [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
  m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
  m.ir_version = 8
  onnx.checker.check_model(m)
  return m


def run_graph(m, x):
  return ort.InferenceSession(m.SerializeToString(),
                              providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
