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
(forge_tflm/testing/artifact_fuzz.py): each mutant that got past the validator and made
LiteRT crash or refuse became a rule here.

This module checks the file, the model, the tensors and the graph, and the manifest
against its model; the builtin operators' rules are in model_check_ops.py,
FORGE_RECALIB's in model_check_forge.py, what they share in model_check_base.py.
Every public name of the four is imported from here (forge_tflm.model_check).
"""

from __future__ import annotations

import dataclasses
import math
import struct

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from forge_tflm import tflite_graph as tg
from forge_tflm.errors import ArtifactError
from forge_tflm.model_check_base import (T, TYPE_NAMES, ModelCheckError, fmt_shape,
                                         printable, scale_count, tensor_shape)
from forge_tflm.model_check_forge import ForgeNodeSpec, forge_node
from forge_tflm.model_check_ops import check_builtin
# The operator rules' limits, importable from here like every validator name.
from forge_tflm.model_check_ops import (  # noqa: F401  (re-exported)
    MAX_CONV_MULTIPLIER, MAX_OP_VERSION, MAX_WINDOW, SUPPORTED_BUILTINS)

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
SCHEMA_VERSION = 3

_ITEMSIZE = {T.FLOAT32: 4, T.INT32: 4, T.INT8: 1, T.UINT8: 1, T.INT16: 2, T.INT64: 8,
             T.BOOL: 1}
_ZERO_POINT_RANGE = {T.INT8: (-128, 127), T.UINT8: (0, 255), T.INT16: (0, 0),
                     T.INT32: (0, 0), T.INT64: (0, 0)}
_MAX_BUILTIN = max(v for k, v in vars(schema.BuiltinOperator).items()
                   if not k.startswith("_"))


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
    return f"tensor {t} {printable(name)}"

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
      self.fail(f"corrupt flatbuffer: {type(e).__name__}: {printable(e, 80)}")
    if m.SubgraphsLength() > 16 or 4 * total > len(data):
      self.fail(f"corrupt flatbuffer: {total} top-level entries do not fit in"
                f" {len(data)} bytes")

  def parse(self) -> None:
    try:
      self.model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(self.buf, 0))
    except Exception as e:
      self.fail(f"corrupt flatbuffer: {type(e).__name__}: {printable(e, 80)}")

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
                    f" ({printable(cc)})")
    self.sg = subgraphs[0]
    if self.sg is None:
      self.fail("subgraph 0 is missing")

  # -- tensors --------------------------------------------------------------------------

  def _shape(self, t: int) -> tuple:
    return tensor_shape(self.sg.tensors[t])

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
      bad(f"type {TYPE_NAMES.get(tensor.type, tensor.type)} is not supported")
    if tensor.name is not None:
      try:  # LiteRT's Python API decodes every name it reports.
        bytes(tensor.name).decode("utf-8")
      except (UnicodeDecodeError, TypeError):
        bad("the name is not valid UTF-8")
    shape = self._shape(t)
    if len(shape) > MAX_RANK:
      bad(f"rank {len(shape)} > {MAX_RANK}")
    if any(d < 1 for d in shape):
      bad(f"shape {fmt_shape(shape)} has a dimension < 1")
    elements = 1
    for d in shape:
      elements *= d
      if elements > MAX_TENSOR_BYTES:
        bad(f"shape {fmt_shape(shape)} has more than 2^31 elements")
    nbytes = elements * _ITEMSIZE[tensor.type]
    if nbytes > MAX_TENSOR_BYTES:
      bad(f"shape {fmt_shape(shape)} needs {nbytes} bytes (limit 2^31 - 1)")
    sig = tensor.shapeSignature
    if sig is not None and len(sig):
      sig = [int(d) for d in np.asarray(sig).ravel()]
      if len(sig) != len(shape) or any(s != d and s != -1 for s, d in zip(sig, shape)):
        bad(f"shape signature {fmt_shape(sig)} does not fit shape {fmt_shape(shape)}")
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
      bad(f"constant data is {len(data)} bytes, shape {fmt_shape(shape)} of"
          f" {TYPE_NAMES[tensor.type]} needs {nbytes}")
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
      bad(f"quantized dimension {qd} is outside shape {fmt_shape(shape)}")
    if len(scale) > 1:
      if not 0 <= qd < len(shape) or shape[qd] != len(scale):
        bad(f"{len(scale)} per-channel scales do not match dimension {qd} of shape"
            f" {fmt_shape(shape)}")
    for s in scale:
      if not (math.isfinite(s) and SCALE_MIN <= s <= SCALE_MAX):
        bad(f"quantization scale {s:.7g} is not in [{SCALE_MIN:g}, {SCALE_MAX:g}]")
    low, high = _ZERO_POINT_RANGE.get(tensor.type, (None, None))
    if low is None:
      bad(f"{TYPE_NAMES[tensor.type]} tensors cannot be quantized")
    for z in zero:
      if not low <= int(z) <= high:
        bad(f"zero point {int(z)} is outside [{low}, {high}] for"
            f" {TYPE_NAMES[tensor.type]}")

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
    self.where = f"operator {i} ({printable(name, 40)[1:-1]})"
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
      if tensor.type != T.INT8 or scale_count(tensor) != 1:
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
      self.fail(f"unsupported custom op {printable(name)} (forge_tflm runs"
                f" {tg.FORGE_RECALIB}, builtins and the caller's host ops)")
    check_builtin(self, i, op, name, op_inputs, op_outputs)


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
  return "absent" if value is None else printable(value, 40) if isinstance(
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
         f"{what} tensor {printable(tg.tensor_name(tensor))} has {scale:.9g},"
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
      fail(f"{where}.{field}_tensor", printable(getattr(site, f"{field}_tensor")),
           f"{op}'s {field} is tensor {printable(name)}")
    _same_quant(fail, f"{where}.{field}_quantization", quant, sg.tensors[t],
                f"{op}'s {field}")
  producer = next((o for o in sg.operators
                   if o.outputs is not None and spec.input in list(o.outputs)), None)
  kind = None if producer is None else _CONV_KINDS.get(tg.op_name(model, producer))
  if site.kind != kind:
    fail(f"{where}.kind", printable(site.kind), f"{op}'s input is written by"
         f" {tg.op_name(model, producer) if producer is not None else 'no operator'}")
