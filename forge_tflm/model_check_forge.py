"""FORGE_RECALIB: the TFLM kernel's Prepare, the one rule of host and device.

Part of forge_tflm.model_check: its graph check calls `forge_node` for each
FORGE_RECALIB operator, and so do the host runtime (segmented.py) and the manifest
check, which use what it returns.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from forge_tflm import tflite_graph as tg
from forge_tflm.model_check_base import (T, TYPE_NAMES, ModelCheckError, fmt_shape,
                                         printable, tensor_shape)


@dataclasses.dataclass(frozen=True)
class ForgeNodeSpec:
  """What a valid FORGE_RECALIB node gives the host (segmented.py) to run it."""
  op_index: int
  input: int
  output: int
  options: object          # forge_tflm.ops.RecalibOptions
  quant: object            # forge_tflm.ops.QuantParams
  beta: np.ndarray         # float32 [C]
  gamma_abs: np.ndarray    # float32 [C]


def forge_node(model: "schema.ModelT", op_index: int, source: str = "model"
               ) -> ForgeNodeSpec:
  """Checks FORGE_RECALIB operator `op_index` of subgraph 0 exactly as the TFLM
  kernel's Init + Prepare do (custom_ops/forge_recalib/micro/forge_recalib_kernel.cc)
  and returns what the host needs to run it; ModelCheckError otherwise.

  Kernel order: options parse (Init), 3 inputs / 1 output, no missing tensor, x and y
  int8, beta and gamma_abs float32, x of rank 2..4, y of x's shape, each dimension but
  the last in [1, 2^22] and their product M <= 2^22, C in [1, 65536], beta and
  gamma_abs of shape [C] and constant, x and y affine per-tensor quantized, then the C
  core's forge_recalib_prepare_quant (scales in [2^-40, 2^40], zero points in int8)
  and forge_recalib_check_targets (finite, |beta| <= 2^40, 0 <= gamma_abs <= 2^40):
  the same C functions on both sides.
  """
  from forge_tflm.ops import QuantParams, RecalibOp

  check = _ForgeCheck(model, op_index, source)
  options = check.options()
  inputs, outputs = check.tensors()
  x, beta_t, gamma_t = (check.sg.tensors[t] for t in inputs)
  c = check.shapes(x, check.sg.tensors[outputs[0]], beta_t, gamma_t)
  beta, gamma = (check.constant(k, t, (c,)) for k, t in ((1, beta_t), (2, gamma_t)))
  (sx, zx), (sy, zy) = (check.quant(k, kind, check.sg.tensors[t]) for k, kind, t in (
      (0, "input", inputs[0]), (0, "output", outputs[0])))
  quant = QuantParams(sx, zx, sy, zy)
  try:  # The C core's Prepare: quantization and targets (same code as the kernel).
    RecalibOp(options, quant, beta, gamma)
  except ValueError as e:
    check.fail(str(e))
  return ForgeNodeSpec(op_index, inputs[0], outputs[0], options, quant, beta, gamma)


class _ForgeCheck:
  """The steps of forge_node, each failing in one line naming the operator."""

  def __init__(self, model, op_index: int, source: str):
    self.model, self.sg = model, model.subgraphs[0]
    self.op = self.sg.operators[op_index]
    self.where = f"{source}: operator {op_index} ({tg.FORGE_RECALIB})"

  def fail(self, msg):
    raise ModelCheckError(" ".join(f"{self.where}: {msg}".split()))

  def label(self, k, kind="input"):
    t = (self.op.inputs if kind == "input" else self.op.outputs)[k]
    return f"{kind} {k} (tensor {t} {printable(self.sg.tensors[t].name)})"

  def options(self):
    from forge_tflm.ops import decode_options

    raw = self.op.customOptions
    try:
      return decode_options(b"" if raw is None else bytes(np.asarray(raw, np.uint8)))
    except ValueError as e:
      self.fail(f"invalid options: {e}")

  def tensors(self) -> tuple[list[int], list[int]]:
    """Input and output indices: 3 and 1, each naming a tensor, x and y int8, beta and
    gamma_abs float32."""
    op, sg = self.op, self.sg
    inputs = [] if op.inputs is None else [int(t) for t in op.inputs]
    outputs = [] if op.outputs is None else [int(t) for t in op.outputs]
    if len(inputs) != 3:
      self.fail(f"has {len(inputs)} inputs, expects 3 (x, beta, gamma_abs)")
    if len(outputs) != 1:
      self.fail(f"has {len(outputs)} outputs, expects 1")
    for k, t in enumerate(inputs):
      if not 0 <= t < len(sg.tensors):
        self.fail(f"input {k} is missing (index {t})")
    if not 0 <= outputs[0] < len(sg.tensors):
      self.fail(f"output 0 is missing (index {outputs[0]})")
    x, beta_t, gamma_t = (sg.tensors[t] for t in inputs)
    if x.type != T.INT8:
      self.fail(f"{self.label(0)} must be int8")
    if sg.tensors[outputs[0]].type != T.INT8:
      self.fail(f"{self.label(0, 'output')} must be int8")
    if beta_t.type != T.FLOAT32 or gamma_t.type != T.FLOAT32:
      self.fail(f"beta and gamma_abs ({self.label(1)}, {self.label(2)}) must be float32,"
                f" are {TYPE_NAMES.get(beta_t.type)} and {TYPE_NAMES.get(gamma_t.type)}")
    return inputs, outputs

  def shapes(self, x, y, beta_t, gamma_t) -> int:
    """x of rank 2..4, y of x's shape, M and C within the kernel's bounds, beta and
    gamma_abs of shape [C]; returns C."""
    from forge_tflm.ops.reference import MAX_C, MAX_M

    xs = tensor_shape(x)
    if not 2 <= len(xs) <= 4:
      self.fail(f"{self.label(0)} has rank {len(xs)}: x must have rank 2..4 (channels"
                " last)")
    if tensor_shape(y) != xs:
      self.fail(f"{self.label(0, 'output')} has shape {fmt_shape(tensor_shape(y))}, x has"
                f" {fmt_shape(xs)}: y must have the shape of x")
    m = 1
    for d in xs[:-1]:
      m *= d
      if not 1 <= d <= MAX_M or m > MAX_M:
        self.fail(f"{self.label(0)} shape {fmt_shape(xs)}: N*H*W per channel must be in"
                  " [1, 2^22]")
    c = xs[-1]
    if not 1 <= c <= MAX_C:
      self.fail(f"{self.label(0)} has {c} channels: the channel count must be in [1,"
                f" {MAX_C}]")
    if tensor_shape(beta_t) != (c,) or tensor_shape(gamma_t) != (c,):
      self.fail(f"beta and gamma_abs have shapes {fmt_shape(tensor_shape(beta_t))} and"
                f" {fmt_shape(tensor_shape(gamma_t))}: both must be [C] = [{c}]")
    return c

  def constant(self, k, t, dims) -> np.ndarray:
    try:
      data = tg.buffer_array(self.model, t)
    except (ValueError, IndexError) as e:
      self.fail(f"{self.label(k)}: unreadable constant data ({e})")
    if data is None:
      self.fail(f"{self.label(k)} must be a constant tensor")
    size = int(np.prod(dims))
    if data.size != size:
      self.fail(f"{self.label(k)}: constant data holds {data.size} values, not {size}")
    return np.ascontiguousarray(data.reshape(dims), np.float32)

  def quant(self, k, kind, t) -> tuple[float, int]:
    q = t.quantization
    scales = [] if q is None or q.scale is None else list(q.scale)
    zeros = [] if q is None or q.zeroPoint is None else list(q.zeroPoint)
    if not scales or not zeros:  # TFLM: affine only with both arrays present.
      self.fail(f"{self.label(k, kind)}: x and y must be int8 with affine quantization")
    if len(scales) != 1 or len(zeros) != 1:
      self.fail(f"{self.label(k, kind)} is per-channel quantized: x and y must be"
                " per-tensor")
    return float(np.float32(scales[0])), int(zeros[0])
