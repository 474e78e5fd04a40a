"""ONNX graph rewrites that make real PyTorch exports convert exactly through onnx2tf.

Run after constant folding (onnx_fold.py), which leaves the shortcut's slice bounds
and pads constant:

  subsample_pad_to_conv: the option-A ResNet shortcut, `F.pad(x[:, :, ::s, ::s], (0, 0,
    0, 0, lo, hi))` (Slice nodes on H/W, then a zero Pad on the channels), becomes
    the equivalent 1x1 convolution with stride s and a 0/1 weight that copies input
    channel i to output channel lo + i. onnx2tf keeps a tensor with C = H = W (e.g.
    [N, 16, 16, 16]) in NCHW order and pads its last axis (W) instead of the channels:
    the model converted without an error and was wrong. A 1x1 convolution has one
    unambiguous layout.

  input_affine_to_depthwise: a per-channel normalization at the model's input,
    `(x / 255 - mean) / std`, becomes one 1x1 depthwise convolution, so that the int8
    model rounds the normalized image once instead of three times (see there).
"""

from __future__ import annotations

import numpy as np

from forge_tflm.converter.onnx_fold import (copy_model, drop_unused_initializers,
                                            node_attr, static_shapes)

__all__ = ["input_affine_to_depthwise", "node_attr", "subsample_pad_to_conv"]


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

  m = copy_model(model)
  consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
  shapes = static_shapes(m)
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
  drop_unused_initializers(m)
  return m, rewritten


def _per_channel(value, channels: int) -> np.ndarray | None:
  """A float constant that broadcasts per channel over NCHW (scalar, [C, 1, 1],
  [1, C, 1, 1]) as a [C] vector, else None."""
  v = np.asarray(value)
  if v.dtype.kind != "f":
    return None
  if v.size == 1:
    return np.full(channels, float(v.reshape(-1)[0]))
  shape = (1,) * (4 - v.ndim) + v.shape if v.ndim <= 4 else ()
  if shape != (1, channels, 1, 1):
    return None
  return v.astype(np.float64).reshape(channels)


def _affine_step(node, x: str, consts, channels: int):
  """(a, b) with node(x) = a * x + b per channel, for Mul/Div/Add/Sub by a constant;
  else None."""
  if node.op_type not in ("Mul", "Div", "Add", "Sub") or len(node.input) != 2 or \
      list(node.input).count(x) != 1:
    return None
  x_first = node.input[0] == x
  other = node.input[1 if x_first else 0]
  c = _per_channel(consts[other], channels) if other in consts else None
  if c is None:
    return None
  one, zero = np.ones(channels), np.zeros(channels)
  if node.op_type == "Mul":
    return c, zero
  if node.op_type == "Add":
    return one, c
  if node.op_type == "Sub":
    return (one, -c) if x_first else (-one, c)
  return (1.0 / c, zero) if x_first and np.all(c != 0) else None


def _leading_affine(m, consts, channels: int):
  """The chain of per-channel affine nodes that starts at the image input, each
  intermediate read once, and its composition (a, b); ([], None, None) if none."""
  consumers: dict[str, list] = {}
  for n in m.graph.node:
    for i in n.input:
      consumers.setdefault(i, []).append(n)
  outputs = {o.name for o in m.graph.output}
  x, chain = _image_input(m), []
  a, b = np.ones(channels), np.zeros(channels)
  while x not in outputs and len(consumers.get(x, [])) == 1:
    node = consumers[x][0]
    step = _affine_step(node, x, consts, channels)
    if step is None:
      break
    a, b = step[0] * a, step[0] * b + step[1]
    chain.append(node)
    x = node.output[0]
  return chain, a, b


def _image_input(m) -> str:
  inits = {i.name for i in m.graph.initializer}
  return next(i.name for i in m.graph.input if i.name not in inits)


def input_affine_to_depthwise(model):
  """A leading per-channel affine normalization, `(x / 255 - mean) / std` inside the
  model, becomes one 1x1 depthwise convolution (weight a[c], bias b[c]). As TFLite
  int8 ops the chain is MUL, SUB, MUL: each requantizes (an extra rounding), and each
  constant vector is quantized per tensor, so mean and 1/std are off by up to half a
  step per channel, a systematic shift of the first conv's input. A depthwise conv
  quantizes its weights per channel (each a[c] exactly) and its bias in int32, so the
  normalized image is rounded once, as with the normalization outside the model.
  A single op with a scalar constant is left alone (it already rounds once, exactly).
  Returns (new model, number of nodes replaced)."""
  from onnx import helper, numpy_helper

  m = copy_model(model)
  shape = static_shapes(m).get(_image_input(m)) if m.graph.input else None
  if shape is None or len(shape) != 4:
    return m, 0
  consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
  chain, a, b = _leading_affine(m, consts, shape[1])
  if not chain or (len(chain) == 1 and np.ptp(a) == 0 and np.ptp(b) == 0):
    return m, 0
  if any(n.op_type == "BatchNormalization" and n.input[0] == chain[-1].output[0]
         for n in m.graph.node):
    return m, 0  # A new Conv before a BN would make the input BN a FORGE site.
  name = f"{chain[-1].name or chain[-1].output[0]}/input_affine"
  m.graph.initializer.extend([
      numpy_helper.from_array(a.astype(np.float32).reshape(-1, 1, 1, 1), f"{name}_w"),
      numpy_helper.from_array(b.astype(np.float32), f"{name}_b")])
  conv = helper.make_node("Conv", [_image_input(m), f"{name}_w", f"{name}_b"],
                          [chain[-1].output[0]], name=f"{name}_as_depthwise",
                          kernel_shape=[1, 1], group=shape[1])
  dropped = {id(n) for n in chain}
  nodes = [conv] + [n for n in m.graph.node if id(n) not in dropped]
  del m.graph.node[:]
  m.graph.node.extend(nodes)
  drop_unused_initializers(m)
  return m, len(chain)
