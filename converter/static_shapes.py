"""Fold run-time shape arithmetic that TFLiteConverter leaves in a converted model.

A Keras model saved with a dynamic batch (legacy .h5 Flatten, for one) converts its
reshapes as SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE, ops TFLite-Micro's exact
resolvers and this project's model checks do not take. Every other dimension is
static, so the shape is a constant with -1 for the batch: RESHAPE then reads that
constant and the shape chain, now unread, is dropped.
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from forge_tflm import tflite_graph as tg


def _static_shape(tensor) -> list[int] | None:
  """The tensor's shape with -1 for at most one dynamic (batch) dimension."""
  sig = tensor.shapeSignature if tensor.shapeSignature is not None else tensor.shape
  if sig is None:
    return None
  sig = [int(d) for d in sig]
  return sig if sum(d < 0 for d in sig) <= 1 else None


def _drop_unread(subgraph, model) -> int:
  """Removes builtin ops none of whose outputs is read; returns how many."""
  dropped = 0
  while True:
    read = {t for op in subgraph.operators for t in op.inputs if t >= 0}
    read.update(int(t) for t in subgraph.outputs)
    keep = [op for op in subgraph.operators
            if tg.is_custom(model, op) or any(t in read for t in op.outputs)]
    if len(keep) == len(subgraph.operators):
      return dropped
    dropped += len(subgraph.operators) - len(keep)
    subgraph.operators = keep


def fold(model_bytes: bytes) -> bytes:
  """The model with every computed RESHAPE shape made constant (bytes unchanged when
  there is none)."""
  model = tg.load_model(model_bytes)
  sg = model.subgraphs[0]
  folded = 0
  for op in sg.operators:
    if tg.op_name(model, op) != "RESHAPE" or len(op.inputs) < 2 or op.inputs[1] < 0:
      continue
    if tg.buffer_array(model, sg.tensors[op.inputs[1]]) is not None:
      continue
    shape = _static_shape(sg.tensors[op.outputs[0]])
    if shape is None:
      continue
    t = schema.TensorT()
    t.shape = [len(shape)]
    t.type = schema.TensorType.INT32
    t.buffer = tg.add_const_buffer(model, np.asarray(shape, np.int32))
    t.name = f"{tg.tensor_name(sg.tensors[op.outputs[0]])}/forge_static_shape"
    sg.tensors.append(t)
    op.inputs[1] = len(sg.tensors) - 1
    folded += 1
  if not folded:
    return model_bytes
  _drop_unread(sg, model)
  return tg.save_model(model)
