"""ONNX graph rewrites that make real PyTorch exports convert exactly through onnx2tf.

Two passes, each returning a new model (the input is not modified):

  fold_constants: evaluates every node whose inputs are all known before any image
    is seen (initializers, Constant nodes, and Shape of a tensor whose shape shape
    inference fixes), with ONNX's reference evaluator, and replaces it by an
    initializer. A PyTorch export without constant folding (needed to keep
    BatchNormalization nodes) computes slice bounds, pads and reshape targets at run
    time in int64 (Shape -> Gather -> Mul ...), and routes weights through Identity and
    Clip bounds through Cast; onnx2tf mis-types such int64 arithmetic ("cannot compute
    Sub as input #1 was expected to be a int64 tensor but is a int32 tensor"). Conv and
    BatchNormalization are never folded, so every site stays.

  subsample_pad_to_conv: the option-A ResNet shortcut, `F.pad(x[:, :, ::s, ::s], (0, 0,
    0, 0, lo, hi))` (Slice nodes on H/W, then a zero Pad on the channels), becomes
    the equivalent 1x1 convolution with stride s and a 0/1 weight that copies input
    channel i to output channel lo + i. onnx2tf keeps a tensor with C = H = W (e.g.
    [N, 16, 16, 16]) in NCHW order and pads its last axis (W) instead of the channels:
    the model converted without an error and was wrong. A 1x1 convolution has one
    unambiguous layout.
"""

from __future__ import annotations

import numpy as np

_NEVER_FOLD = {"Conv", "BatchNormalization", "ConvTranspose", "RandomNormal",
               "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
               "Dropout"}


def _copy(model):
  import onnx

  m = onnx.ModelProto()
  m.CopyFrom(model)
  return m


def _static_shapes(model) -> dict[str, tuple[int, ...]]:
  import onnx

  try:
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
  except Exception:  # Shape inference is an aid here; without it nothing is folded by shape.
    inferred = model
  shapes = {}
  for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + \
      list(inferred.graph.output):
    t = vi.type.tensor_type
    if not t.HasField("shape"):
      continue
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    if all(d is not None and d > 0 for d in dims):
      shapes[vi.name] = tuple(int(d) for d in dims)
  return shapes


def node_attr(node, name, default=None):
  """The value of attribute `name` of an ONNX node, or `default`."""
  from onnx import helper

  for a in node.attribute:
    if a.name == name:
      return helper.get_attribute_value(a)
  return default


def fold_constants(model):
  """See the module docstring. Returns (new model, number of nodes folded)."""
  from onnx import numpy_helper
  from onnx.reference import ReferenceEvaluator

  m = _copy(model)
  consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
  shapes = _static_shapes(m)
  graph_outputs = {o.name for o in m.graph.output}
  keep, new_inits, folded = [], [], 0
  for node in m.graph.node:
    values = None
    if node.op_type == "Constant":
      values = ReferenceEvaluator(node).run(None, {})
    elif node.op_type == "Shape" and node.input[0] in shapes:
      shape = np.array(shapes[node.input[0]], np.int64)
      start, end = node_attr(node, "start", 0), node_attr(node, "end", None)
      values = [shape[start:end]]
    elif node.op_type not in _NEVER_FOLD and node.domain in ("", "ai.onnx") and \
        all(i == "" or i in consts for i in node.input) and \
        not any(o in graph_outputs for o in node.output):
      try:
        values = ReferenceEvaluator(node).run(
            None, {i: consts[i] for i in node.input if i})
      except Exception:  # An op the reference evaluator lacks: leave it to onnx2tf.
        values = None
    if values is None or any(o in graph_outputs for o in node.output):
      keep.append(node)
      continue
    for name, value in zip(node.output, values):
      consts[name] = np.asarray(value)
      new_inits.append(numpy_helper.from_array(np.asarray(value), name))
    folded += 1
  del m.graph.node[:]
  m.graph.node.extend(keep)
  m.graph.initializer.extend(new_inits)
  _drop_unused_initializers(m)
  return m, folded


def _drop_unused_initializers(m) -> None:
  used = {i for n in m.graph.node for i in n.input} | {o.name for o in m.graph.output}
  kept = [i for i in m.graph.initializer if i.name in used]
  del m.graph.initializer[:]
  m.graph.initializer.extend(kept)


def _slice_spec(node, consts, shape) -> dict[int, int] | None:
  """{axis: step} for a Slice that only subsamples H/W from index 0 (every other axis
  whole), else None."""
  ins = list(node.input) + [""] * (5 - len(node.input))
  if any(i and i not in consts for i in ins[1:]):
    return None
  starts, ends = consts[ins[1]], consts[ins[2]]
  axes = consts[ins[3]] if ins[3] else np.arange(len(starts))
  steps = consts[ins[4]] if ins[4] else np.ones(len(starts), np.int64)
  out = {}
  for start, end, axis, step in zip(starts, ends, axes, steps):
    axis = int(axis) % len(shape)
    if int(start) != 0 or int(step) < 1 or int(end) < shape[axis]:
      return None
    if int(step) != 1:
      if axis not in (2, 3):
        return None
      out[axis] = int(step)
  return out


def subsample_pad_to_conv(model):
  """See the module docstring. Returns (new model, number of shortcuts rewritten)."""
  from onnx import helper, numpy_helper

  m = _copy(model)
  consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
  shapes = _static_shapes(m)
  producer = {o: n for n in m.graph.node for o in n.output}
  consumers: dict[str, list] = {}
  for n in m.graph.node:
    for i in n.input:
      consumers.setdefault(i, []).append(n)
  remove, add, inits, rewritten = set(), {}, [], 0
  for pad in m.graph.node:
    if pad.op_type != "Pad" or (node_attr(pad, "mode", b"constant") not in (b"constant",
                                                                        "constant")):
      continue
    pads = consts.get(pad.input[1]) if len(pad.input) > 1 else node_attr(pad, "pads")
    value = consts.get(pad.input[2]) if len(pad.input) > 2 and pad.input[2] else 0.0
    if pads is None or np.size(pads) != 8 or float(np.asarray(value).reshape(-1)[0] if
                                                   np.size(value) else 0.0) != 0.0:
      continue
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    if any(pads[k] for k in (0, 2, 3, 4, 6, 7)) or min(pads) < 0:
      continue  # Only channel padding (axis 1) is a copy into more channels.
    c_lo, c_hi = pads[1], pads[5]
    # Walk back through the Slice chain that feeds the Pad.
    chain, strides, src = [], {2: 1, 3: 1}, pad.input[0]
    while src in producer and producer[src].op_type == "Slice" and \
        len(consumers.get(src, [])) == 1:
      node = producer[src]
      shape = shapes.get(node.input[0])
      spec = _slice_spec(node, consts, shape) if shape and len(shape) == 4 else None
      if spec is None:
        break
      for axis, step in spec.items():
        strides[axis] *= step
      chain.append(node)
      src = node.input[0]
    in_shape = shapes.get(src)
    if in_shape is None or len(in_shape) != 4:
      continue
    c_in = in_shape[1]
    c_out = c_in + c_lo + c_hi
    weight = np.zeros((c_out, c_in, 1, 1), np.float32)
    weight[c_lo + np.arange(c_in), np.arange(c_in), 0, 0] = 1.0
    w_name = f"{pad.name or pad.output[0]}/subsample_pad_weight"
    inits.append(numpy_helper.from_array(weight, w_name))
    conv = helper.make_node("Conv", [src, w_name], [pad.output[0]],
                            name=f"{pad.name or pad.output[0]}/as_conv1x1",
                            kernel_shape=[1, 1], strides=[strides[2], strides[3]])
    remove.update(id(n) for n in chain + [pad])
    add[id(pad)] = conv
    rewritten += 1
  if not rewritten:
    return m, 0
  nodes = []
  for n in m.graph.node:
    if id(n) in add:
      nodes.append(add[id(n)])
    elif id(n) not in remove:
      nodes.append(n)
  del m.graph.node[:]
  m.graph.node.extend(nodes)
  m.graph.initializer.extend(inits)
  _drop_unused_initializers(m)
  return m, rewritten
