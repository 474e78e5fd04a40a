"""The model validator: every `.tflite` is checked here before an interpreter sees it.

LiteRT's Python interpreter and TFLite-Micro trust the flatbuffer: an operator input
index of -2, an ADD whose output scale is 1e-30 or a softmax beta of 0 reach C++
assertions (abort), null dereferences (segfault) or allocations that never finish.
`check_model` turns each such file into one `ModelCheckError` (an ArtifactError, so
a ValueError: the CLI prints it as one line) that names the file, the operator (index
and name) and the tensor (index and name). `Artifact.load` and `SegmentedModel` call
it, so the evaluator, the firmware export and every other entry point that reads a
`.tflite` go through it.

What is checked (in this order):
  file       size, the 'TFL3' identifier, the root table and the top-level vector
             lengths inside the file (the Python flatbuffers package has no verifier:
             parse errors are caught, then the structure is checked field by field);
  model      schema version 3, one subgraph, operator codes (a builtin code TFLite
             has, custom ops named), buffer 0 empty, no external buffers or buffer
             offsets (data outside the flatbuffer);
  tensors    known type, UTF-8 name, shape (rank <= 6, every dimension >= 1,
             elements and bytes < 2^31, all tensors together <= MAX_TOTAL_BYTES),
             shape signature, constant data exactly the bytes its shape and type need,
             quantization (scales finite in [SCALE_MIN, SCALE_MAX], zero points in the
             type's range, quantized dimension inside the shape, per-channel arrays as
             long as that dimension, activations per-tensor), no sparsity / variables
             / custom quantization;
  graph      one int8 input, int8 outputs, operator inputs -1 (optional) or a tensor,
             outputs a tensor, every tensor written once, read only after it is
             written (or a constant / the graph input);
  operators  a supported builtin (SUPPORTED_BUILTINS, at a version LiteRT resolves)
             with its options, operand types, shapes (the declared output shape must
             be the one the op computes from its inputs, so no interpreter resizes
             anything) and the quantization limits its LiteRT / TFLM / XNNPACK kernels
             assert (ADD/SUB: the output multiplier < 1; SOFTMAX: beta * s_in large
             enough; conv / fully connected: multipliers < 256), or FORGE_RECALIB under
             `forge_node` (the TFLM kernel's Prepare, the one rule of both sides), or
             a custom op the caller runs on the host.

Rules marked in tests/test_model_check.py as "fuzz" were found by the artifact fuzz
(tests/runtime/artifact_fuzz.py): each mutant that got past the validator and made
LiteRT crash or refuse became a rule here.
"""

from __future__ import annotations

import dataclasses
import math
import struct

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from forge_tflm import tflite_graph as tg
from forge_tflm.errors import ArtifactError

# Limits. Elements and bytes of one tensor stay below 2^31 (kernels index with int);
# all tensors of the model together at their declared shapes (batch 1 for our models)
# at most 1 GiB: a CNN for a microcontroller needs a few hundred KB, and anything near
# the limit would take minutes per image on the host anyway.
MAX_FILE_BYTES = 2**31 - 1
MAX_TENSOR_BYTES = 2**31 - 1
MAX_TOTAL_BYTES = 2**30
MAX_RANK = 6
# Quantization scales: finite and in this range (TFLite's kernels compute multipliers
# from ratios of scales in double; within it every ratio and product is finite).
SCALE_MIN = 1e-20
SCALE_MAX = 1e20
# Strides, dilations, pool windows and paddings (LiteRT keeps them in int16).
MAX_WINDOW = (1 << 15) - 1
# Requantization multipliers s_x * s_w / s_y of convolutions and fully connected
# layers: XNNPACK (LiteRT's optimized kernels) refuses >= 256.
MAX_CONV_MULTIPLIER = 256.0
SCHEMA_VERSION = 3
# Operator versions the pinned LiteRT (ai-edge-litert 2.3.0) resolves in both kernel
# modes (BUILTIN_REF for "reference", the builtin resolver for "optimized"); measured
# by building a one-op model per version. TFLM ignores versions.
MAX_OP_VERSION = {
    "ADD": 5, "AVERAGE_POOL_2D": 3, "CONCATENATION": 7, "CONV_2D": 8,
    "DEPTHWISE_CONV_2D": 6, "FULLY_CONNECTED": 14, "MAX_POOL_2D": 3, "MEAN": 3,
    "MUL": 7, "PAD": 6, "RELU": 3, "RELU6": 3, "RESHAPE": 1, "SOFTMAX": 3, "SUB": 5,
}

T = schema.TensorType
O = schema.BuiltinOptions
_ACT = schema.ActivationFunctionType
_TYPE_NAMES = {v: k for k, v in vars(T).items() if not k.startswith("_")}
_ITEMSIZE = {T.FLOAT32: 4, T.INT32: 4, T.INT8: 1, T.UINT8: 1, T.INT16: 2, T.INT64: 8,
             T.BOOL: 1}
_ZERO_POINT_RANGE = {T.INT8: (-128, 127), T.UINT8: (0, 255), T.INT16: (0, 0),
                     T.INT32: (0, 0), T.INT64: (0, 0)}
_MAX_BUILTIN = max(v for k, v in vars(schema.BuiltinOperator).items()
                   if not k.startswith("_"))
_INT8_ACTIVATIONS = (_ACT.NONE, _ACT.RELU, _ACT.RELU6, _ACT.RELU_N1_TO_1)


class ModelCheckError(ArtifactError):
  """A `.tflite` that the interpreters cannot safely run; the message is one line."""


def _printable(value, limit: int = 60) -> str:
  """A name as one short printable line (names come from the file: anything goes)."""
  if value is None:
    return "''"
  if isinstance(value, (bytes, bytearray, np.ndarray)):
    value = bytes(value).decode("utf-8", "replace")
  text = "".join(c if c.isprintable() else "?" for c in str(value))
  if len(text) > limit:
    text = text[:limit - 3] + "..."
  return repr(text)


def _shape(tensor) -> tuple[int, ...]:
  """A tensor's shape as ints (() where the table has none)."""
  return () if tensor.shape is None else tuple(int(d) for d in np.asarray(tensor.shape).ravel())


def _fmt_shape(shape) -> str:
  return "[" + ",".join(str(int(d)) for d in shape) + "]"


@dataclasses.dataclass
class _Operand:
  """One tensor as an operator sees it."""
  index: int
  tensor: "schema.TensorT"
  shape: tuple
  const: np.ndarray | None  # Constant data, or None.


class _Checker:
  def __init__(self, data: bytes, source: str, host_ops):
    self.data = data
    self.source = source
    self.host_ops = frozenset(host_ops)
    self.model = None
    self.sg = None
    self.shapes: dict[int, tuple] = {}
    self.checked: set[int] = set()
    self.where = ""  # "operator 3 (ADD)" while an operator is being checked.

  # -- messages -------------------------------------------------------------------

  def fail(self, msg: str):
    prefix = f"{self.source}: " + (f"{self.where}: " if self.where else "")
    raise ModelCheckError(" ".join((prefix + msg).split()))

  def tensor_label(self, t: int) -> str:
    name = self.sg.tensors[t].name if self.sg is not None and 0 <= t < len(
        self.sg.tensors) else None
    return f"tensor {t} {_printable(name)}"

  # -- file structure -----------------------------------------------------------------

  def check_file(self) -> None:
    data = self.data
    if not isinstance(data, (bytes, bytearray)):
      self.fail(f"model must be bytes, not {type(data).__name__}")
    if len(data) > MAX_FILE_BYTES:
      self.fail(f"{len(data)} bytes: larger than a flatbuffer can be (2 GiB)")
    if len(data) < 16 or data[4:8] != tg.FILE_IDENTIFIER:
      self.fail("not a TFLite flatbuffer (missing the 'TFL3' identifier)")
    root = struct.unpack_from("<I", data, 0)[0]
    if root % 4 or not 8 <= root <= len(data) - 4:
      self.fail(f"corrupt flatbuffer: root table offset {root} outside the"
                f" {len(data)}-byte file")
    # Vector lengths before the object API walks them: each element takes at least
    # 4 bytes, so the top-level vectors together fit in the file. This bounds the
    # work of the parse below (shared vectors could otherwise multiply it).
    self.buf = bytearray(data)  # The object API reads a bytearray.
    try:
      m = schema.Model.GetRootAs(self.buf, 0)
      total = m.OperatorCodesLength() + m.BuffersLength() + m.SubgraphsLength()
      total += m.MetadataLength() + m.SignatureDefsLength()
      for i in range(min(m.SubgraphsLength(), 16)):
        sg = m.Subgraphs(i)
        total += sg.TensorsLength() + sg.OperatorsLength()
    except Exception as e:  # Corrupt flatbuffers raise assorted errors.
      self.fail(f"corrupt flatbuffer: {type(e).__name__}: {_printable(e, 80)}")
    if m.SubgraphsLength() > 16 or 4 * total > len(data):
      self.fail(f"corrupt flatbuffer: {total} top-level entries do not fit in"
                f" {len(data)} bytes")

  def parse(self) -> None:
    try:
      self.model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(self.buf, 0))
    except Exception as e:
      self.fail(f"corrupt flatbuffer: {type(e).__name__}: {_printable(e, 80)}")

  # -- model ----------------------------------------------------------------------------

  def check_model(self) -> None:
    m = self.model
    if m.version != SCHEMA_VERSION:
      self.fail(f"schema version {m.version}, not {SCHEMA_VERSION}")
    subgraphs = m.subgraphs or []
    if len(subgraphs) != 1:
      self.fail(f"{len(subgraphs)} subgraphs: forge_tflm runs models with exactly one")
    if m.externalBuffers or m.externalBufferGroups:
      self.fail("external buffers are not supported")
    buffers = m.buffers or []
    if not buffers:
      self.fail("no buffers (buffer 0 must exist and be empty)")
    for i, b in enumerate(buffers):
      if b is None:
        self.fail(f"buffer {i} is missing")
      if b.offset or b.size:
        self.fail(f"buffer {i} points outside the flatbuffer (offset {b.offset},"
                  f" size {b.size}): not supported")
    if buffers[0].data is not None and len(buffers[0].data):
      self.fail("buffer 0 must be empty (it is the 'no data' buffer)")
    for i, code in enumerate(m.operatorCodes or []):
      if code is None:
        self.fail(f"operator code {i} is missing")
      builtin = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
      if not 0 <= builtin <= _MAX_BUILTIN:
        self.fail(f"operator code {i}: builtin code {builtin} is not a TFLite operator")
      if builtin == schema.BuiltinOperator.CUSTOM:
        cc = code.customCode
        try:
          name = cc.decode("utf-8") if isinstance(cc, (bytes, bytearray)) else cc
        except UnicodeDecodeError:
          name = None
        if not name or not name.isprintable():
          self.fail(f"operator code {i}: custom operator without a valid name"
                    f" ({_printable(cc)})")
    self.sg = subgraphs[0]
    if self.sg is None:
      self.fail("subgraph 0 is missing")

  # -- tensors --------------------------------------------------------------------------

  def _shape(self, t: int) -> tuple:
    return _shape(self.sg.tensors[t])

  def check_tensor(self, t: int, role: str) -> None:
    """Generic checks of tensor t, once (role: how the first user refers to it)."""
    if t in self.checked:
      return
    self.checked.add(t)
    tensor = self.sg.tensors[t]
    label = f"{role} ({self.tensor_label(t)})" if role else self.tensor_label(t)

    def bad(msg):
      self.fail(f"{label}: {msg}")

    if tensor is None:
      bad("missing tensor table")
    if tensor.type not in _ITEMSIZE:
      bad(f"type {_TYPE_NAMES.get(tensor.type, tensor.type)} is not supported")
    if tensor.name is not None:
      try:  # LiteRT's Python API decodes every name it reports.
        bytes(tensor.name).decode("utf-8")
      except (UnicodeDecodeError, TypeError):
        bad("the name is not valid UTF-8")
    shape = self._shape(t)
    if len(shape) > MAX_RANK:
      bad(f"rank {len(shape)} > {MAX_RANK}")
    if any(d < 1 for d in shape):
      bad(f"shape {_fmt_shape(shape)} has a dimension < 1")
    elements = 1
    for d in shape:
      elements *= d
      if elements > MAX_TENSOR_BYTES:
        bad(f"shape {_fmt_shape(shape)} has more than 2^31 elements")
    nbytes = elements * _ITEMSIZE[tensor.type]
    if nbytes > MAX_TENSOR_BYTES:
      bad(f"shape {_fmt_shape(shape)} needs {nbytes} bytes (limit 2^31 - 1)")
    sig = tensor.shapeSignature
    if sig is not None and len(sig):
      sig = [int(d) for d in np.asarray(sig).ravel()]
      if len(sig) != len(shape) or any(s != d and s != -1 for s, d in zip(sig, shape)):
        bad(f"shape signature {_fmt_shape(sig)} does not fit shape {_fmt_shape(shape)}")
    if tensor.isVariable:
      bad("variable tensors are not supported")
    if tensor.sparsity is not None:
      bad("sparse tensors are not supported")
    if tensor.variantTensors:
      bad("variant tensors are not supported")
    if getattr(tensor, "externalBuffer", 0):
      bad("external buffers are not supported")
    buffers = self.model.buffers
    if not 0 <= tensor.buffer < len(buffers):
      bad(f"buffer index {tensor.buffer} is not one of the {len(buffers)} buffers")
    data = buffers[tensor.buffer].data
    if tensor.buffer and data is not None and not len(data):  # Buffer 0 is exempt.
      bad(f"buffer {tensor.buffer} holds an empty data vector, which LiteRT reads as a"
          " constant of 0 bytes (a tensor without data leaves the vector out)")
    if data is not None and len(data) and len(data) != nbytes:
      bad(f"constant data is {len(data)} bytes, shape {_fmt_shape(shape)} of"
          f" {_TYPE_NAMES[tensor.type]} needs {nbytes}")
    self._check_quant(tensor, shape, bad)
    self.shapes[t] = shape
    self.total_bytes += nbytes
    if self.total_bytes > MAX_TOTAL_BYTES:
      bad(f"the model's tensors need more than {MAX_TOTAL_BYTES} bytes together")

  def _check_quant(self, tensor, shape, bad) -> None:
    q = tensor.quantization
    if q is None:
      return
    if q.details is not None or q.detailsType:
      bad("custom quantization details are not supported")
    scale = [] if q.scale is None else np.asarray(q.scale, np.float64).ravel()
    zero = [] if q.zeroPoint is None else np.asarray(q.zeroPoint).ravel()
    if len(scale) == 0 and len(zero) == 0:
      return
    if len(scale) != len(zero):
      bad(f"{len(scale)} quantization scales but {len(zero)} zero points")
    qd = int(q.quantizedDimension)
    if qd < 0 or shape and qd >= len(shape):  # LiteRT checks it for every tensor.
      bad(f"quantized dimension {qd} is outside shape {_fmt_shape(shape)}")
    if len(scale) > 1:
      if not 0 <= qd < len(shape) or shape[qd] != len(scale):
        bad(f"{len(scale)} per-channel scales do not match dimension {qd} of shape"
            f" {_fmt_shape(shape)}")
    for s in scale:
      if not (math.isfinite(s) and SCALE_MIN <= s <= SCALE_MAX):
        bad(f"quantization scale {s:.7g} is not in [{SCALE_MIN:g}, {SCALE_MAX:g}]")
    low, high = _ZERO_POINT_RANGE.get(tensor.type, (None, None))
    if low is None:
      bad(f"{_TYPE_NAMES[tensor.type]} tensors cannot be quantized")
    for z in zero:
      if not low <= int(z) <= high:
        bad(f"zero point {int(z)} is outside [{low}, {high}] for"
            f" {_TYPE_NAMES[tensor.type]}")

  def is_const(self, t: int) -> bool:
    data = self.model.buffers[self.sg.tensors[t].buffer].data
    return data is not None and len(data) > 0

  # -- graph ----------------------------------------------------------------------------

  def check_graph(self) -> None:
    """The subgraph: its model inputs and outputs, every operator in order (each reads
    only what is written before it), then the model's ends and every tensor."""
    n = len(self.sg.tensors or [])
    self.total_bytes = 0
    if n == 0 or not self.sg.operators:
      self.fail("the subgraph has no tensors or no operators")
    for i, t in enumerate(self.sg.tensors):
      if t is None:
        self.fail(f"tensor {i} is missing")
    self.inputs, self.outputs = self.model_ends(n)
    written = set(self.inputs)
    for i, op in enumerate(self.sg.operators):
      self.check_operator(i, op, n, written)
    self.where = ""
    self.check_model_ends(written)
    for t in range(n):  # Unused tensors: the device still reads their tables.
      self.check_tensor(t, "")

  def model_ends(self, n: int) -> tuple[list[int], list[int]]:
    sg = self.sg
    inputs = [int(t) for t in (sg.inputs if sg.inputs is not None else [])]
    outputs = [int(t) for t in (sg.outputs if sg.outputs is not None else [])]
    if len(inputs) != 1:
      self.fail(f"the model has {len(inputs)} inputs: forge_tflm runs models with one")
    if not outputs:
      self.fail("the model has no outputs")
    for kind, ids in (("input", inputs), ("output", outputs)):
      for k, t in enumerate(ids):
        if not 0 <= t < n:
          self.fail(f"model {kind} {k} is tensor index {t}, not one of the {n} tensors")
      if len(set(ids)) != len(ids):
        self.fail(f"a tensor is listed twice among the model {kind}s")
    return inputs, outputs

  def check_operator(self, i: int, op, n: int, written: set) -> None:
    """Operator i's table, its inputs (written before, or constant) and outputs (written
    once, here), then its own rule (check_op); adds its outputs to `written`."""
    codes = self.model.operatorCodes or []
    self.where = f"operator {i}"
    if op is None:
      self.fail("missing operator table")
    if not 0 <= op.opcodeIndex < len(codes):
      self.fail(f"operator code index {op.opcodeIndex} is not one of the"
                f" {len(codes)} codes")
    name = tg.op_name(self.model, op)
    self.where = f"operator {i} ({_printable(name, 40)[1:-1]})"
    op_inputs = [int(t) for t in (op.inputs if op.inputs is not None else [])]
    op_outputs = [int(t) for t in (op.outputs if op.outputs is not None else [])]
    if not op_outputs:
      self.fail("no outputs")
    for k, t in enumerate(op_inputs):
      if t == -1:
        continue  # Optional input left out; each op's rule says where it may be.
      if not 0 <= t < n:
        self.fail(f"input {k} is tensor index {t}: neither -1 (optional) nor one of"
                  f" the {n} tensors")
      self.check_tensor(t, f"input {k}")
      if not self.is_const(t) and t not in written:
        self.fail(f"input {k} ({self.tensor_label(t)}) is read before any operator"
                  " writes it (not the model input, not a constant)")
    for k, t in enumerate(op_outputs):
      if not 0 <= t < n:
        self.fail(f"output {k} is tensor index {t}, not one of the {n} tensors")
      self.check_tensor(t, f"output {k}")
      if self.is_const(t):
        self.fail(f"output {k} ({self.tensor_label(t)}) is a constant")
      if t in written:
        self.fail(f"output {k} ({self.tensor_label(t)}) is already written by an"
                  " earlier operator or is the model input")
      if t in op_inputs:
        self.fail(f"output {k} ({self.tensor_label(t)}) is also its input")
      written.add(t)
    self.check_table_extras(op)
    self.check_op(i, op, name, op_inputs, op_outputs)

  def check_table_extras(self, op) -> None:
    """Operator-table fields neither LiteRT's nor TFLM's kernels here read."""
    if op.mutatingVariableInputs is not None and any(op.mutatingVariableInputs):
      self.fail("mutating variable inputs are not supported")
    if op.intermediates is not None and len(op.intermediates):
      self.fail("intermediate tensors are not supported")
    if op.largeCustomOptionsOffset or op.largeCustomOptionsSize:
      self.fail("custom options outside the operator table are not supported")
    if op.builtinOptions2Type:
      self.fail("builtin_options_2 is not supported")

  def check_model_ends(self, written: set) -> None:
    """The model input: not a constant, with a batch dimension; every model output
    written; both int8, per-tensor quantized."""
    inputs, outputs = self.inputs, self.outputs
    for k, t in enumerate(inputs):
      self.check_tensor(t, f"model input {k}")
      if self.is_const(t):
        self.fail(f"model input {k} ({self.tensor_label(t)}) is a constant")
    for k, t in enumerate(outputs):
      self.check_tensor(t, f"model output {k}")
      if t not in written:
        self.fail(f"model output {k} ({self.tensor_label(t)}) is never written")
    for label, t in [("model input", inputs[0])] + [("model output", t) for t in outputs]:
      tensor = self.sg.tensors[t]
      if tensor.type != T.INT8 or _scales(tensor) != 1:
        self.fail(f"{label} ({self.tensor_label(t)}) must be int8, per-tensor quantized"
                  " (forge_tflm runs full-int8 models)")
    if len(self.shapes[inputs[0]]) < 1:
      self.fail(f"model input ({self.tensor_label(inputs[0])}) has no batch dimension")

  # -- operators ---------------------------------------------------------------------

  def check_op(self, i, op, name, op_inputs, op_outputs) -> None:
    if tg.is_custom(self.model, op):
      if name == tg.FORGE_RECALIB:
        forge_node(self.model, i, self.source)
        return
      if name in self.host_ops:  # Run by the caller on the host: x -> y.
        if not op_inputs or op_inputs[0] < 0 or len(op_outputs) != 1:
          self.fail("a host op needs an input 0 and one output")
        x, y = op_inputs[0], op_outputs[0]
        if self.shapes[x] != self.shapes[y] or (self.sg.tensors[x].type !=
                                                self.sg.tensors[y].type):
          self.fail("a host op's output must have its input's shape and type")
        return
      self.fail(f"unsupported custom op {_printable(name)} (forge_tflm runs"
                f" {tg.FORGE_RECALIB}, builtins and the caller's host ops)")
    rule = _RULES.get(name)
    if rule is None:
      self.fail(f"builtin {name} is not supported by forge_tflm (supported:"
                f" {', '.join(sorted(_RULES))})")
    version = int(self.model.operatorCodes[op.opcodeIndex].version)
    if not 1 <= version <= MAX_OP_VERSION[name]:
      self.fail(f"operator version {version} is not one LiteRT runs for {name}"
                f" (1 to {MAX_OP_VERSION[name]})")
    rule(_OpView(self, i, op, name, op_inputs, op_outputs))


def _scales(tensor) -> int:
  q = tensor.quantization
  return 0 if q is None or q.scale is None else len(q.scale)


def _quant(tensor) -> tuple[float, int]:
  q = tensor.quantization
  return float(np.float32(q.scale[0])), int(q.zeroPoint[0])


class _OpView:
  """One operator under check: operand access with messages that name it."""

  def __init__(self, checker: _Checker, i, op, name, op_inputs, op_outputs):
    self.c, self.i, self.op, self.name = checker, i, op, name
    self.ins, self.outs = op_inputs, op_outputs

  def fail(self, msg: str):
    self.c.fail(msg)

  def arity(self, low: int, high: int, outputs: int = 1) -> None:
    if not low <= len(self.ins) <= high:
      want = str(low) if low == high else f"{low} to {high}"
      self.fail(f"has {len(self.ins)} inputs, {self.name} takes {want}")
    if len(self.outs) != outputs:
      self.fail(f"has {len(self.outs)} outputs, {self.name} has {outputs}")

  def label(self, kind: str, k: int) -> str:
    t = (self.ins if kind == "input" else self.outs)[k]
    return f"{kind} {k} ({self.c.tensor_label(t)})"

  def _operand(self, kind, k, types, rank, const, per_channel=False) -> _Operand | None:
    ids = self.ins if kind == "input" else self.outs
    t = ids[k] if k < len(ids) else -1
    if t < 0:
      if const == "optional":
        return None
      self.fail(f"{kind} {k} is missing (-1): {self.name} needs it")
    tensor = self.c.sg.tensors[t]
    label = self.label(kind, k)
    if tensor.type not in types:
      want = " or ".join(_TYPE_NAMES[x] for x in types)
      self.fail(f"{label} is {_TYPE_NAMES.get(tensor.type, tensor.type)}, {self.name}"
                f" needs {want}")
    shape = self.c.shapes[t]
    if rank is not None:
      ranks = rank if isinstance(rank, tuple) else (rank,)
      if len(shape) not in ranks:
        self.fail(f"{label} has rank {len(shape)} (shape {_fmt_shape(shape)}),"
                  f" {self.name} needs {' or '.join(map(str, ranks))}")
    data = None
    if self.c.is_const(t):
      data = tg.buffer_array(self.c.model, tensor)
    if const in (True, "optional") and data is None:
      self.fail(f"{label} must be a constant")
    if tensor.type == T.INT8 and _scales(tensor) == 0:
      self.fail(f"{label} is int8 without quantization parameters")
    if _scales(tensor) > 1 and not per_channel:
      self.fail(f"{label} is per-channel quantized: {self.name} needs it per-tensor")
    return _Operand(t, tensor, shape, data)

  def input(self, k, types=(T.INT8,), rank=None, const=False,
            per_channel=False) -> _Operand | None:
    return self._operand("input", k, types, rank, const, per_channel)

  def output(self, k=0, types=(T.INT8,), rank=None) -> _Operand:
    return self._operand("output", k, types, rank, False)

  def options(self, kind, required: bool = True):
    op = self.op
    if op.builtinOptionsType == O.NONE and not required:
      return None
    if op.builtinOptionsType != kind or op.builtinOptions is None:
      names = {v: k for k, v in vars(O).items() if not k.startswith("_")}
      self.fail(f"builtin options are {names.get(op.builtinOptionsType, '?')},"
                f" {self.name} needs {names[kind]}")
    return op.builtinOptions

  def activation(self, code) -> None:
    if code not in _INT8_ACTIVATIONS:
      self.fail(f"fused activation {code} is not supported for int8")

  def expect_shape(self, out: _Operand, shape, why: str = "") -> None:
    shape = tuple(int(d) for d in shape)
    if any(d < 1 for d in shape):
      self.fail(f"computes an empty output {_fmt_shape(shape)}{why}")
    if tuple(out.shape) != shape:
      self.fail(f"{self.label('output', 0)} has shape {_fmt_shape(out.shape)}, the op"
                f" computes {_fmt_shape(shape)} from its inputs{why}")

  def same_quant(self, a: _Operand, b: _Operand) -> None:
    if _quant(a.tensor) != _quant(b.tensor):
      self.fail(f"input and output quantization differ ({_quant(a.tensor)} vs"
                f" {_quant(b.tensor)}): {self.name} requires the same scale and zero point")

  def weights_quant(self, w: _Operand, axis: int, channels: int, label: str) -> None:
    q = w.tensor.quantization
    n = _scales(w.tensor)
    if n not in (1, channels) or (n > 1 and int(q.quantizedDimension) != axis):
      self.fail(f"{label} ({self.c.tensor_label(w.index)}) must be quantized per tensor"
                f" or per channel along dimension {axis} ({channels} scales), has {n}")
    if any(int(z) != 0 for z in np.asarray(q.zeroPoint).ravel()):
      self.fail(f"{label} ({self.c.tensor_label(w.index)}) has a non-zero zero point"
                " (int8 weights are symmetric)")

  def bias(self, k: int, channels: int, optional: bool = True) -> None:
    if not optional and (len(self.ins) <= k or self.ins[k] == -1):
      self.fail(f"has no bias (input {k}): LiteRT's int8 {self.name} needs one")
    b = self.input(k, (T.INT32,), 1, "optional", per_channel=True)
    if b is not None and b.shape != (channels,):
      self.fail(f"{self.label('input', k)} has shape {_fmt_shape(b.shape)}, not"
                f" [{channels}]")

  def multipliers(self, x: _Operand, w: _Operand, y: _Operand) -> None:
    """The per-channel requantization multipliers s_x * s_w[c] / s_y."""
    s_x, s_y = _quant(x.tensor)[0], _quant(y.tensor)[0]
    for c, s_w in enumerate(np.asarray(w.tensor.quantization.scale, np.float64).ravel()):
      mult = s_x * float(np.float32(s_w)) / s_y
      if _quantize_multiplier_exp(mult) is None or mult >= MAX_CONV_MULTIPLIER:
        self.fail(f"the requantization multiplier s_x * s_w / s_y of channel {c} is"
                  f" {mult:.7g} (input 1 {self.c.tensor_label(w.index)} scale"
                  f" {float(np.float32(s_w)):.7g}): it must be finite and <"
                  f" {MAX_CONV_MULTIPLIER:g}")

  def window(self, value, what: str) -> int:
    if not 1 <= int(value) <= MAX_WINDOW:
      self.fail(f"{what} {value} is not in [1, {MAX_WINDOW}]")
    return int(value)

  def padding(self, value) -> int:
    if value not in (schema.Padding.SAME, schema.Padding.VALID):
      self.fail(f"padding {value} is neither SAME nor VALID")
    return value


def _out_size(size: int, window: int, stride: int, dilation: int, padding: int) -> int:
  """TFLite's ComputeOutSize (C division truncates toward zero)."""
  effective = (window - 1) * dilation + 1
  if padding == schema.Padding.SAME:
    return (size + stride - 1) // stride
  return int((size + stride - effective) / stride)


def _quantize_multiplier_exp(multiplier: float) -> int | None:
  """The shift of TFLite's QuantizeMultiplier(double) (significand rounded to Q31),
  or None where it would not be finite."""
  if not math.isfinite(multiplier) or multiplier <= 0:
    return None
  q, shift = math.frexp(multiplier)
  if round(q * (1 << 31)) == (1 << 31):
    shift += 1
  return shift


# -- builtin rules ----------------------------------------------------------------------


def _conv(v: _OpView) -> None:
  v.arity(2, 3)
  x = v.input(0, rank=4)
  w = v.input(1, rank=4, const=True, per_channel=True)
  y = v.output(0, rank=4)
  o = v.options(O.Conv2DOptions)
  padding = v.padding(o.padding)
  sh, sw = v.window(o.strideH, "stride"), v.window(o.strideW, "stride")
  dh, dw = v.window(o.dilationHFactor, "dilation"), v.window(o.dilationWFactor, "dilation")
  v.activation(o.fusedActivationFunction)
  n, h, wd, cin = x.shape
  cout, kh, kw, wc = w.shape
  if wc != cin:
    v.fail(f"{v.label('input', 1)} has {wc} input channels, the input has {cin}"
           " (grouped convolutions are not supported)")
  if o.quantizedBiasType:
    v.fail(f"quantized bias type {o.quantizedBiasType} is not supported")
  v.weights_quant(w, 0, cout, "input 1")
  v.bias(2, cout, optional=False)
  v.expect_shape(y, (n, _out_size(h, kh, sh, dh, padding),
                     _out_size(wd, kw, sw, dw, padding), cout))
  v.multipliers(x, w, y)


def _depthwise(v: _OpView) -> None:
  v.arity(2, 3)
  x = v.input(0, rank=4)
  w = v.input(1, rank=4, const=True, per_channel=True)
  y = v.output(0, rank=4)
  o = v.options(O.DepthwiseConv2DOptions)
  padding = v.padding(o.padding)
  sh, sw = v.window(o.strideH, "stride"), v.window(o.strideW, "stride")
  dh, dw = v.window(o.dilationHFactor, "dilation"), v.window(o.dilationWFactor, "dilation")
  v.activation(o.fusedActivationFunction)
  n, h, wd, cin = x.shape
  one, kh, kw, cout = w.shape
  if one != 1 or cout % cin or o.depthMultiplier != cout // cin:
    v.fail(f"{v.label('input', 1)} has shape {_fmt_shape(w.shape)}: a depthwise filter"
           f" is [1, H, W, {cin} x depth_multiplier] (depth_multiplier"
           f" {o.depthMultiplier})")
  v.weights_quant(w, 3, cout, "input 1")
  v.bias(2, cout, optional=False)
  v.expect_shape(y, (n, _out_size(h, kh, sh, dh, padding),
                     _out_size(wd, kw, sw, dw, padding), cout))
  v.multipliers(x, w, y)


def _fully_connected(v: _OpView) -> None:
  v.arity(2, 3)
  x = v.input(0)
  w = v.input(1, rank=2, const=True, per_channel=True)
  y = v.output(0)
  o = v.options(O.FullyConnectedOptions)
  v.activation(o.fusedActivationFunction)
  if o.weightsFormat != schema.FullyConnectedOptionsWeightsFormat.DEFAULT:
    v.fail(f"weights format {o.weightsFormat} is not supported")
  if o.quantizedBiasType or o.asymmetricQuantizeInputs or o.quantSpec is not None:
    v.fail("hybrid / block quantization options are not supported")
  cout, depth = w.shape
  elements = int(np.prod(x.shape, dtype=np.int64))
  if not x.shape or x.shape[-1] != depth and o.keepNumDims or elements % depth:
    v.fail(f"{v.label('input', 0)} of shape {_fmt_shape(x.shape)} does not split into"
           f" rows of {depth} (the weights' depth)")
  v.weights_quant(w, 0, cout, "input 1")
  v.bias(2, cout)
  out = x.shape[:-1] + (cout,) if o.keepNumDims else (elements // depth, cout)
  v.expect_shape(y, out)
  v.multipliers(x, w, y)


def _broadcast(v: _OpView, a: tuple, b: tuple) -> tuple:
  rank = max(len(a), len(b))
  a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
  out = []
  for da, db in zip(a, b):
    if da != db and 1 not in (da, db):
      v.fail(f"input shapes {_fmt_shape(a)} and {_fmt_shape(b)} do not broadcast")
    out.append(max(da, db))
  return tuple(out)


def _add_sub(v: _OpView) -> None:
  v.arity(2, 2)
  a, b = v.input(0), v.input(1)
  y = v.output(0)
  kind = O.AddOptions if v.name == "ADD" else O.SubOptions
  o = v.options(kind, required=False)
  if o is not None:
    v.activation(o.fusedActivationFunction)
  if len(a.shape) > 6 or len(b.shape) > 6:
    v.fail("inputs of rank > 6")
  v.expect_shape(y, _broadcast(v, a.shape, b.shape))
  # LiteRT / TFLM int8 ADD and SUB: inputs rescaled by 2^20, then
  # QuantizeMultiplierSmallerThanOneExp(2 * max(s_a, s_b) / (2^20 * s_y)) asserts
  # (aborts) unless that multiplier is < 1 after rounding.
  s_a, s_b, s_y = _quant(a.tensor)[0], _quant(b.tensor)[0], _quant(y.tensor)[0]
  twice_max = 2 * max(s_a, s_b)
  out_mult = twice_max / ((1 << 20) * s_y)
  shift = _quantize_multiplier_exp(out_mult)
  if shift is None or out_mult >= 1 or shift > 0:
    v.fail(f"{v.label('output', 0)} scale {s_y:.7g} is too small for input scales"
           f" {s_a:.7g} and {s_b:.7g} (int8 {v.name} needs 2 * max(s_a, s_b) / s_y"
           " < 2^20)")
  for s in (s_a, s_b):
    if _quantize_multiplier_exp(s / twice_max) is None:
      v.fail("input multiplier is not finite")


def _mul(v: _OpView) -> None:
  v.arity(2, 2)
  a, b = v.input(0), v.input(1)
  y = v.output(0)
  o = v.options(O.MulOptions, required=False)
  if o is not None:
    v.activation(o.fusedActivationFunction)
  v.expect_shape(y, _broadcast(v, a.shape, b.shape))
  mult = _quant(a.tensor)[0] * _quant(b.tensor)[0] / _quant(y.tensor)[0]
  if _quantize_multiplier_exp(mult) is None:
    v.fail("the requantization multiplier s_a * s_b / s_y is not finite")


def _pool(v: _OpView) -> None:
  v.arity(1, 1)
  x = v.input(0, rank=4)
  y = v.output(0, rank=4)
  o = v.options(O.Pool2DOptions)
  padding = v.padding(o.padding)
  sh, sw = v.window(o.strideH, "stride"), v.window(o.strideW, "stride")
  fh, fw = v.window(o.filterHeight, "filter"), v.window(o.filterWidth, "filter")
  v.activation(o.fusedActivationFunction)
  n, h, w, c = x.shape
  v.expect_shape(y, (n, _out_size(h, fh, sh, 1, padding),
                     _out_size(w, fw, sw, 1, padding), c))
  v.same_quant(x, y)


def _mean(v: _OpView) -> None:
  v.arity(2, 2)
  x = v.input(0, rank=(1, 2, 3, 4, 5))
  axes = v.input(1, (T.INT32,), (0, 1), const=True)
  y = v.output(0)
  o = v.options(O.ReducerOptions, required=False)
  keep = bool(o.keepDims) if o is not None else False
  rank = len(x.shape)
  resolved = set()
  for a in np.asarray(axes.const).ravel():
    a = int(a)
    if not -rank <= a < rank:
      v.fail(f"{v.label('input', 1)}: axis {a} is outside a rank-{rank} input")
    resolved.add(a % rank)
  if keep:
    out = tuple(1 if i in resolved else d for i, d in enumerate(x.shape))
  else:
    out = tuple(d for i, d in enumerate(x.shape) if i not in resolved)
  if not out and not keep:
    out = ()
  if tuple(y.shape) != out:
    v.expect_shape(y, out)
  mult = _quant(x.tensor)[0] / _quant(y.tensor)[0]
  if _quantize_multiplier_exp(mult) is None:
    v.fail("the requantization multiplier s_x / s_y is not finite")


def _reshape(v: _OpView) -> None:
  v.arity(1, 2)
  x = v.input(0)
  y = v.output(0)
  shape_in = v.input(1, (T.INT32,), 1, "optional") if len(v.ins) > 1 else None
  o = v.options(O.ReshapeOptions, required=False)
  elements = int(np.prod(x.shape, dtype=np.int64))

  def resolve(target, what):
    if target.count(-1) > 1 or any(d < 1 and d != -1 for d in target) or len(target) > 6:
      v.fail(f"{what} {_fmt_shape(target)} is not valid")
    known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
    if -1 in target:
      if known == 0 or elements % known:
        v.fail(f"{what} {_fmt_shape(target)} does not fit {elements} elements")
      return [elements // known if d == -1 else d for d in target]
    if known != elements:
      v.fail(f"{what} {_fmt_shape(target)} does not hold the input's {elements}"
             " elements")
    return target

  targets = []
  if shape_in is not None:
    targets.append(resolve([int(d) for d in np.asarray(shape_in.const).ravel()],
                           "target shape"))
  if o is not None and o.newShape is not None and len(o.newShape):
    # LiteRT parses new_shape (at most 8 entries) even when the shape input is there.
    targets.append(resolve([int(d) for d in np.asarray(o.newShape).ravel()],
                           "new_shape option"))
  if not targets:
    v.fail("no target shape (neither a shape input nor new_shape)")
  if len(targets) == 2 and targets[0] != targets[1]:
    v.fail(f"the shape input {_fmt_shape(targets[0])} and the new_shape option"
           f" {_fmt_shape(targets[1])} disagree")
  v.expect_shape(y, targets[0])
  v.same_quant(x, y)


def _softmax(v: _OpView) -> None:
  v.arity(1, 1)
  x = v.input(0, rank=(1, 2, 3, 4))
  y = v.output(0)
  o = v.options(O.SoftmaxOptions)
  v.expect_shape(y, x.shape)
  s_x = _quant(x.tensor)[0]
  s_y, z_y = _quant(y.tensor)
  if abs(s_y - 1 / 256) > (1 / 256) * 1e-3 or z_y != -128:
    v.fail(f"{v.label('output', 0)} must have scale 1/256 and zero point -128 (int8"
           f" softmax), has {s_y:.7g} and {z_y}")
  beta = float(np.float32(o.beta))
  # TFLite's PreprocessSoftmaxScaling: QuantizeMultiplierGreaterThanOne(
  # min(beta * s_x * 2^26, 2^31 - 1)) asserts a multiplier > 1.
  if not (math.isfinite(beta) and beta > 0):
    v.fail(f"beta {beta:.7g} must be finite and > 0")
  if not beta * s_x * (1 << 26) > 1.0:
    v.fail(f"beta * input scale = {beta * s_x:.7g} is below 2^-26 (int8 softmax"
           " cannot represent it)")


def _pad(v: _OpView) -> None:
  v.arity(2, 2)
  x = v.input(0, rank=(1, 2, 3, 4, 5))  # LiteRT's PadKernelMaxDimensionCount.
  pads = v.input(1, (T.INT32,), 2, const=True)
  y = v.output(0)
  v.options(O.PadOptions, required=False)
  rank = len(x.shape)
  if pads.shape != (rank, 2):
    v.fail(f"{v.label('input', 1)} has shape {_fmt_shape(pads.shape)}, not [{rank},2]")
  p = np.asarray(pads.const, np.int64).reshape(rank, 2)
  if np.any(p < 0) or np.any(p > MAX_WINDOW):
    v.fail(f"{v.label('input', 1)}: paddings must be in [0, {MAX_WINDOW}]")
  v.expect_shape(y, tuple(d + int(a) + int(b) for d, (a, b) in zip(x.shape, p)))
  v.same_quant(x, y)


def _concatenation(v: _OpView) -> None:
  v.arity(1, 64)
  xs = [v.input(k) for k in range(len(v.ins))]
  y = v.output(0)
  o = v.options(O.ConcatenationOptions)
  if o.fusedActivationFunction != _ACT.NONE:  # LiteRT's int8 kernel refuses them.
    v.fail(f"fused activation {o.fusedActivationFunction}: int8 CONCATENATION takes"
           " none")
  rank = len(xs[0].shape)
  axis = int(o.axis)
  if not -rank <= axis < rank:
    v.fail(f"axis {axis} is outside rank {rank}")
  axis %= rank
  for k, x in enumerate(xs):
    if len(x.shape) != rank or any(d != e for j, (d, e) in enumerate(
        zip(x.shape, xs[0].shape)) if j != axis):
      v.fail(f"{v.label('input', k)} shape {_fmt_shape(x.shape)} does not concatenate"
             f" with {_fmt_shape(xs[0].shape)} along axis {axis}")
  out = list(xs[0].shape)
  out[axis] = sum(x.shape[axis] for x in xs)
  v.expect_shape(y, out)
  for x in xs:  # LiteRT's int8 CONCATENATION does not requantize.
    v.same_quant(x, y)


def _relu(v: _OpView) -> None:
  v.arity(1, 1)
  x = v.input(0)
  y = v.output(0)
  v.expect_shape(y, x.shape)
  if _quantize_multiplier_exp(_quant(x.tensor)[0] / _quant(y.tensor)[0]) is None:
    v.fail("the requantization multiplier s_x / s_y is not finite")


_RULES = {
    "CONV_2D": _conv, "DEPTHWISE_CONV_2D": _depthwise,
    "FULLY_CONNECTED": _fully_connected, "ADD": _add_sub, "SUB": _add_sub, "MUL": _mul,
    "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool, "MEAN": _mean, "RESHAPE": _reshape,
    "SOFTMAX": _softmax, "PAD": _pad, "CONCATENATION": _concatenation, "RELU": _relu,
    "RELU6": _relu,
}
SUPPORTED_BUILTINS = tuple(sorted(_RULES))


# -- FORGE_RECALIB: the TFLM kernel's Prepare, the one rule of host and device ----------


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
    return f"{kind} {k} (tensor {t} {_printable(self.sg.tensors[t].name)})"

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
                f" are {_TYPE_NAMES.get(beta_t.type)} and {_TYPE_NAMES.get(gamma_t.type)}")
    return inputs, outputs

  def shapes(self, x, y, beta_t, gamma_t) -> int:
    """x of rank 2..4, y of x's shape, M and C within the kernel's bounds, beta and
    gamma_abs of shape [C]; returns C."""
    from forge_tflm.ops.reference import MAX_C, MAX_M

    xs = _shape(x)
    if not 2 <= len(xs) <= 4:
      self.fail(f"{self.label(0)} has rank {len(xs)}: x must have rank 2..4 (channels"
                " last)")
    if _shape(y) != xs:
      self.fail(f"{self.label(0, 'output')} has shape {_fmt_shape(_shape(y))}, x has"
                f" {_fmt_shape(xs)}: y must have the shape of x")
    m = 1
    for d in xs[:-1]:
      m *= d
      if not 1 <= d <= MAX_M or m > MAX_M:
        self.fail(f"{self.label(0)} shape {_fmt_shape(xs)}: N*H*W per channel must be in"
                  " [1, 2^22]")
    c = xs[-1]
    if not 1 <= c <= MAX_C:
      self.fail(f"{self.label(0)} has {c} channels: the channel count must be in [1,"
                f" {MAX_C}]")
    if _shape(beta_t) != (c,) or _shape(gamma_t) != (c,):
      self.fail(f"beta and gamma_abs have shapes {_fmt_shape(_shape(beta_t))} and"
                f" {_fmt_shape(_shape(gamma_t))}: both must be [C] = [{c}]")
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


# -- entry point ------------------------------------------------------------------------


def check_model(data: bytes, source: str = "model", host_ops=()) -> "schema.ModelT":
  """Validates the `.tflite` bytes; returns the parsed model (the object API's
  ModelT) or raises ModelCheckError naming `source`, the operator and the tensor.

  host_ops: custom operator names the caller runs on the host itself (x -> y of the
  same shape and type), accepted besides FORGE_RECALIB.
  """
  checker = _Checker(data, source, host_ops)
  checker.check_file()
  checker.parse()
  checker.check_model()
  checker.check_graph()
  return checker.model


# -- the manifest against its model -----------------------------------------------------

_CONV_KINDS = {"CONV_2D": "conv", "DEPTHWISE_CONV_2D": "depthwise"}


def _show(value) -> str:
  return "absent" if value is None else _printable(value, 40) if isinstance(
      value, str) else f"{value:.9g}" if isinstance(value, float) else str(value)


def check_manifest(manifest, model: "schema.ModelT", model_bytes: int) -> None:
  """Every manifest field the model states is the model's (`model`: check_model's
  result): its size, input and output quantization, the contract's channels, and per
  site the FORGE operator (op_index), its channels, options, tensors, quantization and
  the kind of conv feeding it; every FORGE operator has its site. ArtifactError
  naming the field otherwise, so no tool acts on a field the model contradicts."""
  sg = model.subgraphs[0]

  def fail(field, value, truth):
    raise ArtifactError(" ".join(f"field {field} is {value}, but {truth}".split()))

  if manifest.model_bytes != model_bytes:
    fail("model_bytes", manifest.model_bytes, f"the model has {model_bytes} bytes")
  for field, t, q in (("input.quantization", sg.inputs[0], manifest.input_quant),
                      ("output.quantization", sg.outputs[0], manifest.output_quant)):
    _same_quant(fail, field, q, sg.tensors[t], f"the model's {field.split('.')[0]}")
  contract = manifest.input_contract
  channels_in = int(np.asarray(sg.tensors[sg.inputs[0]].shape).ravel()[-1])
  if contract.kind == "normalize" and len(contract.mean) not in (1, channels_in):
    fail("input.contract.mean", f"{len(contract.mean)} values",
         f"the model input has {channels_in} channels")
  forge = [i for i, op in enumerate(sg.operators)
           if tg.is_custom(model, op) and tg.op_name(model, op) == tg.FORGE_RECALIB]
  for k, site in enumerate(manifest.sites):
    if site.op_index not in forge:
      fail(f"sites[{k}].op_index", site.op_index, f"the model's {tg.FORGE_RECALIB}"
           f" operators are {forge[:8]}")
    _check_site(fail, f"sites[{k}]", site, model, forge_node(model, site.op_index))
  missing = sorted(set(forge) - {s.op_index for s in manifest.sites})
  if missing:
    fail("sites", f"without operator {missing[0]}",
         f"it is one of the model's {tg.FORGE_RECALIB} operators")


def _same_quant(fail, field, quant, tensor, what) -> None:
  scale, zero = tg.per_tensor_quant(tensor)
  if not quant.same_as(scale, zero):
    fail(field, f"scale {quant.scale:.9g}, zero point {quant.zero_point}",
         f"{what} tensor {_printable(tg.tensor_name(tensor))} has {scale:.9g},"
         f" {zero}")


def _check_site(fail, where, site, model, spec: ForgeNodeSpec) -> None:
  sg = model.subgraphs[0]
  op = f"operator {spec.op_index}"
  if site.channels != spec.beta.shape[0]:
    fail(f"{where}.channels", site.channels, f"{op} has {spec.beta.shape[0]} channels")
  for name in (f.name for f in dataclasses.fields(spec.options)):
    ours, theirs = getattr(site.options, name), getattr(spec.options, name)
    if ours != theirs:
      fail(f"{where}.options.{name}", _show(ours), f"{op}'s options have {_show(theirs)}")
  for field, t, quant in (("input", spec.input, site.input_quant),
                          ("output", spec.output, site.output_quant)):
    name = tg.tensor_name(sg.tensors[t])
    if getattr(site, f"{field}_tensor") != name:
      fail(f"{where}.{field}_tensor", _printable(getattr(site, f"{field}_tensor")),
           f"{op}'s {field} is tensor {_printable(name)}")
    _same_quant(fail, f"{where}.{field}_quantization", quant, sg.tensors[t],
                f"{op}'s {field}")
  producer = next((o for o in sg.operators
                   if o.outputs is not None and spec.input in list(o.outputs)), None)
  kind = None if producer is None else _CONV_KINDS.get(tg.op_name(model, producer))
  if site.kind != kind:
    fail(f"{where}.kind", _printable(site.kind), f"{op}'s input is written by"
         f" {tg.op_name(model, producer) if producer is not None else 'no operator'}")
