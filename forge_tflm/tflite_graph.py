"""Small helpers over the TFLite flatbuffer object API (ai_edge_litert's schema).

Shared by the converter (inserting FORGE_RECALIB) and the runtime (splitting a
model into builtin-only segments); neither needs TensorFlow for this.
"""

from __future__ import annotations

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

FILE_IDENTIFIER = b"TFL3"
FORGE_RECALIB = "FORGE_RECALIB"

_NUMPY_TYPES = {
    schema.TensorType.FLOAT32: np.float32,
    schema.TensorType.INT32: np.int32,
    schema.TensorType.INT8: np.int8,
    schema.TensorType.UINT8: np.uint8,
    schema.TensorType.INT16: np.int16,
    schema.TensorType.INT64: np.int64,
    schema.TensorType.BOOL: np.bool_,
}
_BUILTIN_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items()
                  if not k.startswith("_")}


class ModelFormatError(ValueError):
  """The bytes are not a TFLite model this tool can work with."""


def load_model(data: bytes) -> "schema.ModelT":
  if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
    raise ModelFormatError("not a TFLite flatbuffer (missing 'TFL3' identifier)")
  try:
    return schema.ModelT.InitFromObj(schema.Model.GetRootAs(bytearray(data), 0))
  except Exception as e:  # Corrupt flatbuffers raise assorted errors.
    raise ModelFormatError(f"corrupt TFLite flatbuffer: {type(e).__name__}: {e}") from e


def save_model(model: "schema.ModelT") -> bytes:
  builder = flatbuffers.Builder(1 << 20)
  builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
  return bytes(builder.Output())


def op_name(model: "schema.ModelT", op: "schema.OperatorT") -> str:
  """'CONV_2D', 'DEPTHWISE_CONV_2D', ..., or the custom code for custom ops."""
  code = model.operatorCodes[op.opcodeIndex]
  builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
  if builtin == schema.BuiltinOperator.CUSTOM:
    cc = code.customCode
    return cc.decode() if isinstance(cc, bytes) else str(cc)
  return _BUILTIN_NAMES.get(builtin, f"BUILTIN_{builtin}")


def is_custom(model: "schema.ModelT", op: "schema.OperatorT") -> bool:
  code = model.operatorCodes[op.opcodeIndex]
  return max(code.builtinCode, code.deprecatedBuiltinCode) == schema.BuiltinOperator.CUSTOM


def custom_opcode_index(model: "schema.ModelT", custom_code: str) -> int:
  """Index of the operator code for `custom_code`, added if absent."""
  for i, code in enumerate(model.operatorCodes):
    cc = code.customCode
    if cc is not None and (cc.decode() if isinstance(cc, bytes) else cc) == custom_code:
      return i
  code = schema.OperatorCodeT()
  code.builtinCode = schema.BuiltinOperator.CUSTOM
  code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
  code.customCode = custom_code
  code.version = 1
  model.operatorCodes.append(code)
  return len(model.operatorCodes) - 1


def tensor_name(tensor: "schema.TensorT") -> str:
  n = tensor.name
  return n.decode() if isinstance(n, bytes) else str(n)


def numpy_dtype(tensor: "schema.TensorT"):
  if tensor.type not in _NUMPY_TYPES:
    raise ModelFormatError(f"tensor {tensor_name(tensor)!r} has unsupported type {tensor.type}")
  return _NUMPY_TYPES[tensor.type]


def buffer_array(model: "schema.ModelT", tensor: "schema.TensorT") -> np.ndarray | None:
  """The constant data of `tensor`, or None when it is not a constant."""
  if tensor.buffer <= 0 or tensor.buffer >= len(model.buffers):
    return None
  data = model.buffers[tensor.buffer].data
  if data is None or len(data) == 0:
    return None
  arr = np.frombuffer(np.asarray(data, dtype=np.uint8).tobytes(), dtype=numpy_dtype(tensor))
  return arr.reshape(tuple(tensor.shape)) if tensor.shape is not None else arr


def add_const_buffer(model: "schema.ModelT", array: np.ndarray) -> int:
  buf = schema.BufferT()
  buf.data = np.frombuffer(np.ascontiguousarray(array).tobytes(), dtype=np.uint8)
  model.buffers.append(buf)
  return len(model.buffers) - 1


def per_tensor_quant(tensor: "schema.TensorT") -> tuple[float, int]:
  """(scale, zero_point) of a per-tensor quantized tensor; ValueError otherwise."""
  q = tensor.quantization
  if q is None or q.scale is None or len(q.scale) == 0:
    raise ValueError(f"tensor {tensor_name(tensor)!r} is not quantized")
  if len(q.scale) != 1:
    raise ValueError(f"tensor {tensor_name(tensor)!r} is per-channel quantized")
  return float(q.scale[0]), int(q.zeroPoint[0])


def make_quant(scale: float, zero_point: int) -> "schema.QuantizationParametersT":
  q = schema.QuantizationParametersT()
  q.scale = [float(scale)]
  q.zeroPoint = [int(zero_point)]
  return q


def int8_params(low: float, high: float) -> tuple[float, int]:
  """TFLite's asymmetric int8 (scale, zero point) for [low, high] widened to hold 0
  (the one formula: converter ranges and the scale-adapt baseline both use it)."""
  low, high = min(low, 0.0), max(high, 0.0)
  if high - low < 1e-8:
    high = low + 1e-8
  scale = (high - low) / 255.0
  zero_point = int(np.clip(np.round(-128 - low / scale), -128, 127))
  return float(scale), zero_point
