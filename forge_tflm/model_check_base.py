"""What the validator's modules share: its error, the schema's type names and the
readers that print names and shapes and read a tensor's quantization.

model_check.py checks the file and the graph, model_check_ops.py the builtin
operators, model_check_forge.py FORGE_RECALIB; every public name is imported from
forge_tflm.model_check.
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from forge_tflm.errors import ArtifactError

T = schema.TensorType
TYPE_NAMES = {v: k for k, v in vars(T).items() if not k.startswith("_")}


class ModelCheckError(ArtifactError):
  """A `.tflite` that the interpreters cannot safely run; the message is one line."""


def printable(value, limit: int = 60) -> str:
  """A name as one short printable line (names come from the file: anything goes)."""
  if value is None:
    return "''"
  if isinstance(value, (bytes, bytearray, np.ndarray)):
    value = bytes(value).decode("utf-8", "replace")
  text = "".join(c if c.isprintable() else "?" for c in str(value))
  if len(text) > limit:
    text = text[:limit - 3] + "..."
  return repr(text)


def tensor_shape(tensor) -> tuple[int, ...]:
  """A tensor's shape as ints (() where the table has none)."""
  return () if tensor.shape is None else tuple(int(d) for d in np.asarray(tensor.shape).ravel())


def fmt_shape(shape) -> str:
  return "[" + ",".join(str(int(d)) for d in shape) + "]"


def scale_count(tensor) -> int:
  q = tensor.quantization
  return 0 if q is None or q.scale is None else len(q.scale)


def scale_zero(tensor) -> tuple[float, int]:
  q = tensor.quantization
  return float(np.float32(q.scale[0])), int(q.zeroPoint[0])
