"""Constant folding of an ONNX graph whose input shape is fixed.

A PyTorch export computes at run time, in int64, what is static once the input shape
is: slice bounds and pads (Shape -> Gather -> Mul ...), reshape targets
(`x.view(x.size(0), -1)`: Shape -> Gather -> Unsqueeze -> Concat), and routes weights
through Identity and Clip bounds through Cast. onnx2tf mistypes such int64 arithmetic
("'ConcatV2' Op have types [int32, int64]", "cannot compute Sub as input #1 was
expected to be a int64 tensor but is a int32 tensor"). So, before onnx2tf runs:

  pin_batch: a symbolic batch dimension (`dynamic_axes`) becomes 1, the batch the
    converter runs;
  fold_constants: every node whose inputs are all known before any image is seen
    (initializers, Constant nodes, Shape/Size of a tensor whose shape shape inference
    fixes) is evaluated with ONNX's reference evaluator and replaced by an
    initializer; then nodes nothing reads are dropped. It repeats until nothing
    changes, because one fold can fix shapes further on: an option-A shortcut's Pad
    with run-time pads leaves the batch dimension unknown to shape inference until
    the pads are folded, and with it every later Shape (the flatten's). Conv and
    BatchNormalization are never folded, so every site stays.
"""

from __future__ import annotations

import numpy as np

_NEVER_FOLD = {"Conv", "BatchNormalization", "ConvTranspose", "RandomNormal",
               "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
               "Dropout"}
_MAX_ROUNDS = 32  # Each round folds at least one node; real exports need 2-3.


def copy_model(model):
  import onnx

  m = onnx.ModelProto()
  m.CopyFrom(model)
  return m


def node_attr(node, name, default=None):
  """The value of attribute `name` of an ONNX node, or `default`."""
  from onnx import helper

  for a in node.attribute:
    if a.name == name:
      return helper.get_attribute_value(a)
  return default


def static_shapes(model) -> dict[str, tuple[int, ...]]:
  """{tensor: shape} for every tensor shape inference gives a fully known shape."""
  import onnx

  m = copy_model(model)
  del m.graph.value_info[:]  # Stale entries (folded or symbolic) would only mislead it.
  try:
    inferred = onnx.shape_inference.infer_shapes(m, data_prop=True)
  except Exception:  # Shape inference is an aid here; without it nothing is folded by shape.
    inferred = m
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


def pin_batch(model):
  """Returns (new model, True if a symbolic batch dimension of the input became 1)."""
  m = copy_model(model)
  inits = {i.name for i in m.graph.initializer}
  inputs = [i for i in m.graph.input if i.name not in inits]
  if len(inputs) != 1 or not inputs[0].type.tensor_type.shape.dim:
    return m, False
  batch = inputs[0].type.tensor_type.shape.dim[0]
  if batch.HasField("dim_value") and batch.dim_value > 0:
    return m, False
  param = batch.dim_param
  batch.dim_value = 1  # Replaces dim_param (a oneof).
  for out in m.graph.output:  # The same symbol on an output is the same batch.
    dims = out.type.tensor_type.shape.dim
    if dims and param and dims[0].dim_param == param:
      dims[0].dim_value = 1
  return m, True


def _shape_value(node, shapes) -> list[np.ndarray] | None:
  """Shape or Size of a tensor whose shape is static, else None."""
  shape = shapes.get(node.input[0])
  if shape is None:
    return None
  if node.op_type == "Size":
    return [np.array(int(np.prod(shape)), np.int64)]
  start, end = node_attr(node, "start", 0), node_attr(node, "end", None)
  return [np.array(shape, np.int64)[start:end]]


def _evaluate(node, consts, shapes) -> list[np.ndarray] | None:
  """The outputs of `node` if they are known without an image, else None."""
  from onnx.reference import ReferenceEvaluator

  if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
    return _shape_value(node, shapes)
  if node.op_type in _NEVER_FOLD or node.domain not in ("", "ai.onnx") or \
      not all(i == "" or i in consts for i in node.input):
    return None
  try:
    return ReferenceEvaluator(node).run(None, {i: consts[i] for i in node.input if i})
  except Exception:  # An op the reference evaluator lacks: leave it to onnx2tf.
    return None


def _fold_round(m) -> int:
  """Folds what the current shapes allow, in place; returns the number of nodes."""
  from onnx import numpy_helper

  consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
  shapes = static_shapes(m)
  graph_outputs = {o.name for o in m.graph.output}
  keep, new_inits = [], []
  for node in m.graph.node:
    values = None
    if not any(o in graph_outputs for o in node.output):
      values = _evaluate(node, consts, shapes)
    if values is None:
      keep.append(node)
      continue
    for name, value in zip(node.output, values):
      consts[name] = np.asarray(value)
      new_inits.append(numpy_helper.from_array(np.asarray(value), name))
  folded = len(m.graph.node) - len(keep)
  del m.graph.node[:]
  m.graph.node.extend(keep)
  m.graph.initializer.extend(new_inits)
  return folded


def remove_dead_nodes(m) -> int:
  """Drops, in place, nodes none of whose outputs is read; returns how many."""
  needed = {o.name for o in m.graph.output}
  live = []
  for node in reversed(m.graph.node):
    if any(o in needed for o in node.output):
      live.append(node)
      needed.update(i for i in node.input if i)
  removed = len(m.graph.node) - len(live)
  del m.graph.node[:]
  m.graph.node.extend(reversed(live))
  return removed


def drop_unused_initializers(m) -> None:
  used = {i for n in m.graph.node for i in n.input} | {o.name for o in m.graph.output}
  kept = [i for i in m.graph.initializer if i.name in used]
  del m.graph.initializer[:]
  m.graph.initializer.extend(kept)


def _drop_stale_value_info(m) -> None:
  produced = {o for n in m.graph.node for o in n.output}
  kept = [v for v in m.graph.value_info if v.name in produced]
  del m.graph.value_info[:]
  m.graph.value_info.extend(kept)


def fold_constants(model):
  """See the module docstring. Returns (new model, number of nodes folded or dropped)."""
  m = copy_model(model)
  total = 0
  for _ in range(_MAX_ROUNDS):
    changed = _fold_round(m) + remove_dead_nodes(m)
    total += changed
    if not changed:
      break
  drop_unused_initializers(m)
  _drop_stale_value_info(m)
  return m, total
