"""Run a FORGE `.tflite` in the LiteRT interpreter by splitting it at host ops.

The pip interpreter cannot load our kernel through a stable API, so the model's
operator list is cut at every FORGE_RECALIB node into segment models that hold
only builtin ops. Tensors that cross a cut (residual skips included) are passed
between segments unchanged, as int8 arrays; each FORGE node runs in the C core
on the host (a `forge_tflm.ops.RecalibOp`, prepared once per node). With an identity host step the
segmented run is bit-identical to the unsplit model (tests check this).

Per batch the host work is kept small: interpreter tensor indices are cached,
a FORGE node whose output only the next segment reads writes it straight into
that segment's input tensor (no allocation, no copy), other FORGE outputs reuse
one buffer per node and batch size, and each node's options, quantization and
scratch are prepared once (`RecalibOp`), so a batch costs one C call per node.

Kernel modes: "reference" is TFLite-Micro's integer arithmetic (device numerics):
LiteRT's BUILTIN_REF kernels, which equal TFLM's reference kernels bit for bit on
these models, except FULLY_CONNECTED, which LiteRT requantizes with one rounding and
TFLM with two, so reference mode runs it on the host with TFLM's arithmetic
(tflm_kernels.py). "optimized" uses LiteRT's default kernels (faster; may differ from
the device by an LSB).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from forge_tflm import model_check
from forge_tflm import tflite_graph as tg
from forge_tflm.ops import QuantParams, RecalibOp, RecalibOptions, reference
from forge_tflm.quiet import native_output_hidden
from forge_tflm.runtime.tflm_kernels import TFLM_HOST_BUILTINS

KERNEL_MODES = {"reference": OpResolverType.BUILTIN_REF, "optimized": OpResolverType.AUTO}
# The op's modes (SPEC "Modes and app controls"): adapt, frozen at the current state, and source (the
# clean targets, state untouched: the int8 model as converted).
ADAPT, FROZEN, SOURCE = "adapt", "frozen", "source"
# Adapt where the op is label-safe (option label_safe), source elsewhere: the field
# controller's mode while the stream's labels look correlated.
ADAPT_SAFE = "adapt_safe"


@dataclasses.dataclass
class _Bound:
  """A segment's interpreter for one batch size, with its tensor indices cached
  (get_input_details() builds dicts: too slow to call per batch)."""
  it: Interpreter
  ins: list[int]   # Interpreter tensor index of each segment input.
  outs: list[int]


@dataclasses.dataclass
class _Segment:
  model_bytes: bytes
  inputs: list[int]    # Original tensor indices, in segment-input order.
  outputs: list[int]
  label: str = ""      # "operators 3-7 (CONV_2D, ADD, ...)", for messages.
  interpreters: dict = dataclasses.field(default_factory=dict)  # batch -> _Bound


@dataclasses.dataclass
class ForgeNode:
  """One FORGE_RECALIB node: where it sits, its tensors and its prepared op."""
  name: str
  op_index: int  # In the full model's operator list.
  input: int
  output: int
  op: RecalibOp  # Options, quantization and live state, prepared once.

  @property
  def options(self) -> RecalibOptions:
    return self.op.options

  @property
  def quant(self) -> QuantParams:
    return self.op.quant

  @property
  def state(self):
    return self.op.state


def _segment_model(model: "schema.ModelT", op_ids: list[int], inputs: list[int],
                   outputs: list[int]) -> bytes:
  """A model with only ops `op_ids` of subgraph 0 and the tensors/buffers they use.

  The model has passed model_check.check_model: every operator input is a tensor or
  -1 (an optional input left out), the only negative index TFLite defines, kept as is.
  """
  sg = model.subgraphs[0]
  used = sorted({t for i in op_ids for t in list(sg.operators[i].inputs) +
                 list(sg.operators[i].outputs) if t != -1} | set(inputs) | set(outputs))
  tensor_map = {old: new for new, old in enumerate(used)}
  buffers = [schema.BufferT()]
  tensors = []
  for old in used:
    t = sg.tensors[old]
    nt = schema.TensorT()
    nt.shape, nt.shapeSignature, nt.type = t.shape, t.shapeSignature, t.type
    nt.name, nt.quantization, nt.isVariable = t.name, t.quantization, t.isVariable
    nt.buffer = 0
    if t.buffer > 0 and tg.buffer_array(model, t) is not None:
      buf = schema.BufferT()  # The data only (never an offset into another file).
      buf.data = model.buffers[t.buffer].data
      buffers.append(buf)
      nt.buffer = len(buffers) - 1
    tensors.append(nt)
  ops = []
  for i in op_ids:
    op = sg.operators[i]
    nop = schema.OperatorT()
    for field in ("opcodeIndex", "builtinOptionsType", "builtinOptions", "customOptions",
                  "customOptionsFormat"):
      setattr(nop, field, getattr(op, field))
    nop.inputs = [-1 if t == -1 else tensor_map[t] for t in op.inputs]
    nop.outputs = [tensor_map[t] for t in op.outputs]
    ops.append(nop)
  nsg = schema.SubGraphT()
  nsg.tensors, nsg.operators = tensors, ops
  nsg.inputs = [tensor_map[t] for t in inputs]
  nsg.outputs = [tensor_map[t] for t in outputs]
  nsg.name = "segment"
  m = schema.ModelT()
  m.version, m.operatorCodes, m.subgraphs, m.buffers = 3, model.operatorCodes, [nsg], buffers
  m.description = "forge_tflm segment"
  return tg.save_model(m)


class SegmentedModel:
  """Executes a (FORGE-)int8 TFLite model segment by segment.

  Args:
    model_bytes: the flatbuffer.
    kernels: "reference" or "optimized".
    host_kernels: extra custom ops run on the host, name -> fn(x, node_op) -> y
      (tests use an identity op to check splitting exactness).
    site_names: operator index -> site name of each FORGE node (the manifest's
      record, `from_artifact`); unnamed nodes are called FORGE_RECALIB@<index>.
    source: what the bytes are (the file path) in error messages.

  The model is validated first (forge_tflm.model_check): an invalid one raises
  model_check.ModelCheckError (a ValueError) and never reaches LiteRT. Errors LiteRT
  still reports while preparing or running a segment come back as one-line
  ValueErrors naming the segment's operators.
  """

  def __init__(self, model_bytes: bytes, kernels: str = "reference",
               host_kernels: dict[str, Callable] | None = None, num_threads: int = 1,
               site_names: dict[int, str] | None = None, source: str = "model"):
    # num_threads=1 per segment interpreter: small segments gain nothing from
    # threads, and on the shared 2-core host they only contend. Compare with
    # a plain interpreter at the same count (benchmarks/bench_eval_overhead.py).
    if kernels not in KERNEL_MODES:
      raise ValueError(f"kernels must be one of {sorted(KERNEL_MODES)}, not {kernels!r}")
    self.kernels = kernels
    self.num_threads = num_threads
    # What runs at FORGE nodes: fn(node, x, mode) -> y; None = the C core. Baselines
    # (scale-adapt) swap in their own host step here.
    self.forge_kernel: Callable | None = None
    # Sites that adapt in "adapt" mode (None: all); the others run in "source" mode,
    # i.e. as converted. Layer selection measures candidate subsets this way without
    # converting each one (a subset artifact differs only by the int8 rounding of
    # the ops it leaves out).
    self.adapting: frozenset[str] | None = None
    self._host_kernels = dict(host_kernels or {})
    self._site_names = dict(site_names or {})
    self.source = source
    model = model_check.check_model(model_bytes, source, host_ops=self._host_kernels)
    sg = model.subgraphs[0]
    self._graph_inputs = [int(t) for t in sg.inputs]
    self._graph_outputs = [int(t) for t in sg.outputs]
    self.input_quant = tg.per_tensor_quant(sg.tensors[sg.inputs[0]])
    self.output_quant = tg.per_tensor_quant(sg.tensors[sg.outputs[0]])
    self.output_shape = tuple(sg.tensors[sg.outputs[0]].shape[1:])
    self.input_shape = tuple(sg.tensors[sg.inputs[0]].shape[1:])
    self.nodes: list[ForgeNode] = []
    groups = self._groups(model, kernels)
    self._steps = self._build_steps(model, groups)
    self._host_consts = self._host_constants(model)
    self._direct = self._direct_writes()
    self._forge_out: dict[tuple, np.ndarray] = {}  # (step, shape) -> reused y

  def _groups(self, model, kernels: str) -> list[tuple[str, list[int]]]:
    """The operators as runs of builtin ops (one LiteRT segment each) separated by
    host ops (FORGE, host kernels, TFLM-arithmetic builtins with reference kernels)."""
    groups: list[tuple[str, list[int]]] = []
    for i, op in enumerate(model.subgraphs[0].operators):
      name = tg.op_name(model, op)
      if tg.is_custom(model, op):
        if name != tg.FORGE_RECALIB and name not in self._host_kernels:
          raise ValueError(f"unsupported custom op {name!r} (op {i})")
        groups.append(("host", [i]))
      elif kernels == "reference" and name in TFLM_HOST_BUILTINS:
        groups.append(("host", [i]))  # TFLM's arithmetic, not LiteRT's (tflm_kernels).
      elif groups and groups[-1][0] == "builtin":
        groups[-1][1].append(i)
      else:
        groups.append(("builtin", [i]))
    return groups

  def _build_steps(self, model, groups) -> list[tuple[str, object]]:
    """One step per group: a host node, or a segment interpreter whose inputs are the
    tensors it reads from earlier steps and whose outputs are those read later."""
    sg = model.subgraphs[0]
    needed_after: list[set[int]] = []  # Read by a later group or a graph output.
    later = set(self._graph_outputs)
    for kind, ids in reversed(groups):
      needed_after.append(set(later))
      for i in ids:
        later.update(t for t in sg.operators[i].inputs if t >= 0)
    needed_after.reverse()
    steps = []
    for (kind, ids), after in zip(groups, needed_after):
      if kind == "host":
        steps.append(("host", self._host_node(model, ids[0])))
        continue
      produced = {t for i in ids for t in sg.operators[i].outputs}
      ins = []
      for i in ids:
        for t in sg.operators[i].inputs:
          if (t >= 0 and t not in produced and t not in ins
              and tg.buffer_array(model, sg.tensors[t]) is None):
            ins.append(int(t))
      outs = [int(t) for i in ids for t in sg.operators[i].outputs if t in after]
      names = ", ".join(dict.fromkeys(tg.op_name(model, sg.operators[i]) for i in ids))
      label = (f"operator {ids[0]}" if len(ids) == 1 else
               f"operators {ids[0]}-{ids[-1]}") + f" ({names})"
      steps.append(("segment", _Segment(_segment_model(model, ids, ins, outs), ins, outs,
                                        label)))
    return steps

  def _host_constants(self, model) -> dict[int, np.ndarray]:
    """Constants that host steps read (a FORGE or host op may take one as its x)."""
    sg, consts = model.subgraphs[0], {}
    for kind, step in self._steps:
      if kind == "host":
        t = step.input if isinstance(step, ForgeNode) else step[2]
        data = tg.buffer_array(model, sg.tensors[t])
        if data is not None:
          consts[t] = np.ascontiguousarray(data)
    return consts

  def _direct_writes(self) -> dict[int, int]:
    """FORGE node k writes y straight into the input buffer of segment k + 1 when that
    segment is the only reader of y (saves an allocation and a copy per site): step
    index -> position of y among that segment's inputs."""
    direct = {}
    for k, (kind, step) in enumerate(self._steps[:-1]):
      if not isinstance(step, ForgeNode) or step.output in self._graph_outputs:
        continue
      readers = [j for j, (kd, st) in enumerate(self._steps) if j > k and step.output in (
          st.inputs if kd == "segment" else [st.input] if isinstance(st, ForgeNode)
          else [st[2]])]
      if readers == [k + 1] and self._steps[k + 1][0] == "segment":
        direct[k] = self._steps[k + 1][1].inputs.index(step.output)
    return direct

  @classmethod
  def from_artifact(cls, artifact, kernels: str = "reference",
                    **kwargs) -> "SegmentedModel":
    """From a forge_tflm.artifact.Artifact (its nodes named by the manifest's
    sites) or plain model bytes."""
    if isinstance(artifact, (bytes, bytearray)):
      return cls(bytes(artifact), kernels, **kwargs)
    kwargs.setdefault("source", artifact.path)
    model = cls(artifact.model, kernels, site_names=artifact.site_names, **kwargs)
    if artifact.manifest is not None:
      recorded = {s.op_index for s in artifact.manifest.sites}
      found = {n.op_index for n in model.nodes}
      if recorded != found:
        raise model_check.ModelCheckError(
            f"{artifact.path}: the manifest's FORGE sites (ops {sorted(recorded)}) are"
            f" not the model's (ops {sorted(found)})")
    return model

  def _host_node(self, model, i: int):
    sg = model.subgraphs[0]
    op = sg.operators[i]
    name = tg.op_name(model, op)
    if name in TFLM_HOST_BUILTINS and not tg.is_custom(model, op):
      return (name, TFLM_HOST_BUILTINS[name](model, op), int(op.inputs[0]),
              int(op.outputs[0]))
    if name != tg.FORGE_RECALIB:
      fn = self._host_kernels[name]
      return (name, lambda x, fn=fn, op=op: fn(x, op), int(op.inputs[0]),
              int(op.outputs[0]))
    # The one FORGE rule (the TFLM kernel's Prepare); check_model has applied it.
    spec = model_check.forge_node(model, i, self.source)
    node = ForgeNode(name=self._site_names.get(i, f"{tg.FORGE_RECALIB}@{i}"), op_index=i,
                     input=spec.input, output=spec.output,
                     op=RecalibOp(spec.options, spec.quant, spec.beta, spec.gamma_abs))
    self.nodes.append(node)
    return node

  # -- state control ------------------------------------------------------------

  def adapt_only(self, names) -> None:
    """Lets only the sites `names` adapt (None: every site); see `adapting`."""
    if names is None:
      self.adapting = None
      return
    names = frozenset(names)
    unknown = sorted(names - {n.name for n in self.nodes})
    if unknown:
      raise ValueError(f"unknown site(s) {', '.join(unknown)}; the model's sites are:"
                       f" {', '.join(n.name for n in self.nodes)}")
    self.adapting = names

  def reset(self) -> None:
    """Restores every FORGE node to its clean targets (start of a stream)."""
    for node in self.nodes:
      node.state.reset()

  def get_state(self) -> list[np.ndarray]:
    return [n.state.data.copy() for n in self.nodes]

  def set_state(self, states: list[np.ndarray]) -> None:
    """Restores get_state()'s values. Refuses (ValueError) a wrong count or shape, and
    values the op would repair at once (SPEC "Repair": a non-finite mean or a
    non-finite or negative variance), rather than accepting a corrupted state."""
    states = list(states)
    if len(states) != len(self.nodes):
      raise ValueError(f"set_state: {len(states)} states for {len(self.nodes)} FORGE nodes")
    checked = [self._checked_state(n, s) for n, s in zip(self.nodes, states)]
    for n, s in zip(self.nodes, checked):
      n.state.data[:] = s

  @staticmethod
  def _checked_state(node, s) -> np.ndarray:
    """One node's state in its own dtype: an arithmetic=int node's int32 Q16/Q12
    values pass through float32 only up to 2^24, so they are never converted."""
    c = node.state.channels
    raw = np.asarray(s)
    if raw.shape != (2 * c,):
      raise ValueError(f"set_state: node {node.name} takes {2 * c} values "
                       f"[mu x {c}, var x {c}], got shape {raw.shape}")
    if node.state.integer:
      if not np.issubdtype(raw.dtype, np.integer):
        raise ValueError(f"set_state: node {node.name}: an arithmetic=int state is "
                         "int32 (Q16 means, Q12 variances)")
      mu, var = raw[:c].astype(np.int64), raw[c:].astype(np.int64)
      if (np.abs(mu) > reference.MU_MAX).any() or (var < 0).any() or (
          var > reference.VAR_MAX).any():
        raise ValueError(f"set_state: node {node.name}: the state must be finite with "
                         "variances >= 0 (int: |mu| <= 2^30, 0 <= var < 2^30)")
      return raw.astype(np.int32)
    s = raw.astype(np.float32)
    if not (np.isfinite(s).all() and (s[c:] >= 0).all()):
      raise ValueError(f"set_state: node {node.name}: the state must be finite with "
                       "variances >= 0")
    return s

  # -- execution ------------------------------------------------------------------

  def _bound(self, seg: _Segment, shapes: list[tuple]) -> _Bound:
    batch = shapes[0][0] if shapes else 1
    bound = seg.interpreters.get(batch)
    if bound is None:
      try:
        with native_output_hidden():  # LiteRT's C++ logs its delegate to stderr.
          it = Interpreter(model_content=seg.model_bytes, num_threads=self.num_threads,
                           experimental_op_resolver_type=KERNEL_MODES[self.kernels],
                           experimental_preserve_all_tensors=False)
          ins = [d["index"] for d in it.get_input_details()]
          for i, shape in zip(ins, shapes):
            it.resize_tensor_input(i, list(shape), strict=False)
          it.allocate_tensors()
          outs = [d["index"] for d in it.get_output_details()]
      except (RuntimeError, ValueError) as e:
        raise self._litert_error(seg, "rejected", e) from e
      bound = _Bound(it, ins, outs)
      seg.interpreters[batch] = bound
    return bound

  def _litert_error(self, seg: _Segment, what: str, e: Exception) -> ValueError:
    detail = " ".join(str(e).split())
    if len(detail) > 300:
      detail = detail[:297] + "..."
    return ValueError(f"{self.source}: LiteRT {what} {seg.label}: {detail}")

  def run(self, x: np.ndarray, mode: str = ADAPT) -> np.ndarray:
    """Runs a batch of int8 inputs [N, ...]; returns the int8 output.

    mode: "adapt" updates FORGE state; "frozen" normalizes with the current state;
    "source" with the clean targets, leaving the state as it is; "adapt_safe" adapts
    the label-safe sites and runs the others in source mode.
    """
    if mode not in (ADAPT, FROZEN, SOURCE, ADAPT_SAFE):
      raise ValueError(f"mode must be {ADAPT!r}, {FROZEN!r}, {SOURCE!r} or {ADAPT_SAFE!r},"
                       f" not {mode!r}")
    if x.dtype != np.int8:
      raise ValueError(f"input must be int8 (quantize with input_quant), got {x.dtype}")
    if tuple(x.shape[1:]) != self.input_shape:
      raise ValueError(f"input shape {x.shape[1:]} does not match model {self.input_shape}")
    values: dict[int, np.ndarray] = dict(self._host_consts)
    values[self._graph_inputs[0]] = np.ascontiguousarray(x)
    written: dict[int, tuple] = {}  # Tensor -> shape, already in its reader's input.
    try:
      for k, (kind, step) in enumerate(self._steps):
        if kind == "segment":
          bound = self._bound(step, [written[t] if t in written else values[t].shape
                                     for t in step.inputs])
          it = bound.it
          for i, t in zip(bound.ins, step.inputs):
            if t not in written:
              it.set_tensor(i, values[t])
          try:
            it.invoke()
          except RuntimeError as e:
            raise self._litert_error(step, "failed running", e) from e
          for i, t in zip(bound.outs, step.outputs):
            # A view, not a copy: valid until this segment runs again (next batch),
            # by which time this run's `values` are gone.
            values[t] = it.tensor(i)()
        elif isinstance(step, ForgeNode):
          self._run_forge(k, step, values, written, mode)
        else:
          _, fn, t_in, t_out = step
          values[t_out] = fn(values[t_in])
      y = np.array(values[self._graph_outputs[0]])  # Own copy for the caller.
    finally:
      values.clear()  # Drop the views before any segment can run again.
    return y

  def _run_forge(self, k: int, node: ForgeNode, values: dict, written: dict,
                 mode: str) -> None:
    x = values[node.input]
    if mode == ADAPT and self.adapting is not None and node.name not in self.adapting:
      mode = SOURCE
    if self.forge_kernel is not None:
      values[node.output] = self.forge_kernel(node, x, mode)
      return
    pos = self._direct.get(k)
    if pos is None:
      out = self._forge_out.get((k, x.shape))
      if out is None:
        out = self._forge_out[(k, x.shape)] = np.empty_like(x)
      # Reused per batch: like the segment views, valid until the next run().
      values[node.output] = node.op(x, mode=mode, out=out)
      return
    seg = self._steps[k + 1][1]
    bound = self._bound(seg, [x.shape if t == node.output else
                              written[t] if t in written else values[t].shape
                              for t in seg.inputs])
    buf = bound.it.tensor(bound.ins[pos])()
    try:
      node.op(x, mode=mode, out=buf)
    finally:
      del buf  # LiteRT refuses to invoke while a view of its tensors is alive.
    written[node.output] = x.shape

  def quantize_input(self, x_float: np.ndarray) -> np.ndarray:
    scale, zp = self.input_quant
    return np.clip(np.round(x_float / scale) + zp, -128, 127).astype(np.int8)

  def dequantize_output(self, y: np.ndarray) -> np.ndarray:
    scale, zp = self.output_quant
    return (y.astype(np.float32) - zp) * np.float32(scale)
