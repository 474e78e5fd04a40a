"""Run a FORGE `.tflite` in the LiteRT interpreter by splitting it at host ops.

The pip interpreter cannot load our kernel through a stable API, so the model's
operator list is cut at every FORGE_RECALIB node into segment models that hold
only builtin ops. Tensors that cross a cut (residual skips included) are passed
between segments unchanged, as int8 arrays; each FORGE node runs in the C core
on the host (`forge_tflm.ops.forge_recalib_c`). With an identity host step the
segmented run is bit-identical to the unsplit model (tests check this).

Kernel modes: "reference" uses BUILTIN_REF (the integer arithmetic of the
TFLite-Micro reference kernels and ESP-NN: device numerics); "optimized" uses
the default resolver (faster, may differ by an LSB).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from forge_tflm import tflite_graph as tg
from forge_tflm.ops import (QuantParams, RecalibOptions, RecalibState, decode_options,
                            forge_recalib_c)

KERNEL_MODES = {"reference": OpResolverType.BUILTIN_REF, "optimized": OpResolverType.AUTO}
ADAPT, FROZEN = "adapt", "frozen"


@dataclasses.dataclass
class _Segment:
  model_bytes: bytes
  inputs: list[int]    # Original tensor indices, in segment-input order.
  outputs: list[int]
  interpreters: dict = dataclasses.field(default_factory=dict)  # batch -> Interpreter


@dataclasses.dataclass
class ForgeNode:
  """One FORGE_RECALIB node: its tensors, options, quantization and live state."""
  name: str
  input: int
  output: int
  options: RecalibOptions
  quant: QuantParams
  state: RecalibState


def _segment_model(model: "schema.ModelT", op_ids: list[int], inputs: list[int],
                   outputs: list[int]) -> bytes:
  """A model with only ops `op_ids` of subgraph 0 and the tensors/buffers they use."""
  sg = model.subgraphs[0]
  used = sorted({t for i in op_ids for t in list(sg.operators[i].inputs) +
                 list(sg.operators[i].outputs) if t >= 0} | set(inputs) | set(outputs))
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
      buffers.append(model.buffers[t.buffer])
      nt.buffer = len(buffers) - 1
    tensors.append(nt)
  ops = []
  for i in op_ids:
    op = sg.operators[i]
    nop = schema.OperatorT()
    for field in ("opcodeIndex", "builtinOptionsType", "builtinOptions", "customOptions",
                  "customOptionsFormat"):
      setattr(nop, field, getattr(op, field))
    nop.inputs = [tensor_map[t] if t >= 0 else -1 for t in op.inputs]
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
  """

  def __init__(self, model_bytes: bytes, kernels: str = "reference",
               host_kernels: dict[str, Callable] | None = None, num_threads: int = 1):
    if kernels not in KERNEL_MODES:
      raise ValueError(f"kernels must be one of {sorted(KERNEL_MODES)}, not {kernels!r}")
    self.kernels = kernels
    self.num_threads = num_threads
    # What runs at FORGE nodes: fn(node, x, mode) -> y; None = the C core. Baselines
    # (scale-adapt) swap in their own host step here.
    self.forge_kernel: Callable | None = None
    self._host_kernels = dict(host_kernels or {})
    model = tg.load_model(model_bytes)
    if len(model.subgraphs) != 1:
      raise ValueError(f"models with {len(model.subgraphs)} subgraphs are not supported")
    sg = model.subgraphs[0]
    self._graph_inputs = [int(t) for t in sg.inputs]
    self._graph_outputs = [int(t) for t in sg.outputs]
    self.input_quant = tg.per_tensor_quant(sg.tensors[sg.inputs[0]])
    self.output_quant = tg.per_tensor_quant(sg.tensors[sg.outputs[0]])
    self.input_shape = tuple(sg.tensors[sg.inputs[0]].shape[1:])
    self.nodes: list[ForgeNode] = []
    self._steps: list[tuple[str, object]] = []

    # Group ops into runs of builtin ops separated by host ops.
    groups: list[tuple[str, list[int]]] = []
    for i, op in enumerate(sg.operators):
      name = tg.op_name(model, op)
      if tg.is_custom(model, op):
        if name != tg.FORGE_RECALIB and name not in self._host_kernels:
          raise ValueError(f"unsupported custom op {name!r} (op {i})")
        groups.append(("host", [i]))
      elif groups and groups[-1][0] == "builtin":
        groups[-1][1].append(i)
      else:
        groups.append(("builtin", [i]))

    # Tensors needed after each group: read by a later group or a graph output.
    needed_after: list[set[int]] = []
    later = set(self._graph_outputs)
    for kind, ids in reversed(groups):
      needed_after.append(set(later))
      for i in ids:
        later.update(t for t in sg.operators[i].inputs if t >= 0)
    needed_after.reverse()

    for (kind, ids), after in zip(groups, needed_after):
      if kind == "host":
        self._steps.append(("host", self._host_node(model, ids[0])))
        continue
      produced = {t for i in ids for t in sg.operators[i].outputs}
      ins = []
      for i in ids:
        for t in sg.operators[i].inputs:
          if (t >= 0 and t not in produced and t not in ins
              and tg.buffer_array(model, sg.tensors[t]) is None):
            ins.append(int(t))
      outs = [int(t) for i in ids for t in sg.operators[i].outputs if t in after]
      self._steps.append(("segment", _Segment(_segment_model(model, ids, ins, outs),
                                              ins, outs)))

  def _host_node(self, model, i: int):
    sg = model.subgraphs[0]
    op = sg.operators[i]
    name = tg.op_name(model, op)
    if name != tg.FORGE_RECALIB:
      return (name, op, int(op.inputs[0]), int(op.outputs[0]))
    if len(op.inputs) != 3 or len(op.outputs) != 1:
      raise ValueError(f"FORGE_RECALIB op {i} must have 3 inputs and 1 output")
    x, out = sg.tensors[op.inputs[0]], sg.tensors[op.outputs[0]]
    beta = tg.buffer_array(model, sg.tensors[op.inputs[1]])
    gamma = tg.buffer_array(model, sg.tensors[op.inputs[2]])
    if beta is None or gamma is None:
      raise ValueError(f"FORGE_RECALIB op {i}: beta and |gamma| must be constant tensors")
    options = decode_options(bytes(np.asarray(op.customOptions, np.uint8)))
    s_x, z_x = tg.per_tensor_quant(x)
    s_y, z_y = tg.per_tensor_quant(out)
    node = ForgeNode(name=tg.tensor_name(sg.tensors[op.inputs[1]]).rsplit("/forge_", 1)[0],
                     input=int(op.inputs[0]), output=int(op.outputs[0]), options=options,
                     quant=QuantParams(s_x, z_x, s_y, z_y),
                     state=RecalibState(beta.astype(np.float32), gamma.astype(np.float32)))
    self.nodes.append(node)
    return node

  # -- state control ------------------------------------------------------------

  def reset(self) -> None:
    """Restores every FORGE node to its clean targets (start of a stream)."""
    for node in self.nodes:
      node.state.reset()

  def get_state(self) -> list[np.ndarray]:
    return [n.state.data.copy() for n in self.nodes]

  def set_state(self, states: list[np.ndarray]) -> None:
    for n, s in zip(self.nodes, states):
      n.state.data[:] = s

  # -- execution ------------------------------------------------------------------

  def _interpreter(self, seg: _Segment, values: dict[int, np.ndarray]) -> Interpreter:
    batch = values[seg.inputs[0]].shape[0] if seg.inputs else 1
    it = seg.interpreters.get(batch)
    if it is None:
      it = Interpreter(model_content=seg.model_bytes, num_threads=self.num_threads,
                       experimental_op_resolver_type=KERNEL_MODES[self.kernels],
                       experimental_preserve_all_tensors=False)
      for detail, t in zip(it.get_input_details(), seg.inputs):
        it.resize_tensor_input(detail["index"], list(values[t].shape), strict=False)
      it.allocate_tensors()
      seg.interpreters[batch] = it
    return it

  def run(self, x: np.ndarray, mode: str = ADAPT) -> np.ndarray:
    """Runs a batch of int8 inputs [N, ...]; returns the int8 output.

    mode: "adapt" updates FORGE state; "frozen" normalizes with the current state.
    """
    if mode not in (ADAPT, FROZEN):
      raise ValueError(f"mode must be {ADAPT!r} or {FROZEN!r}, not {mode!r}")
    if x.dtype != np.int8:
      raise ValueError(f"input must be int8 (quantize with input_quant), got {x.dtype}")
    if tuple(x.shape[1:]) != self.input_shape:
      raise ValueError(f"input shape {x.shape[1:]} does not match model {self.input_shape}")
    values: dict[int, np.ndarray] = {self._graph_inputs[0]: np.ascontiguousarray(x)}
    for kind, step in self._steps:
      if kind == "segment":
        it = self._interpreter(step, values)
        for detail, t in zip(it.get_input_details(), step.inputs):
          it.set_tensor(detail["index"], values[t])
        it.invoke()
        for detail, t in zip(it.get_output_details(), step.outputs):
          # A view, not a copy: valid until this segment runs again (next batch),
          # by which time this run's `values` are gone.
          values[t] = it.tensor(detail["index"])()
      elif isinstance(step, ForgeNode):
        if self.forge_kernel is not None:
          values[step.output] = self.forge_kernel(step, values[step.input], mode)
        else:
          values[step.output] = forge_recalib_c(values[step.input], step.state,
                                                step.options, step.quant, mode=mode)
      else:
        name, op, t_in, t_out = step
        values[t_out] = self._host_kernels[name](values[t_in], op)
    result = np.array(values[self._graph_outputs[0]])  # Own copy for the caller.
    values.clear()  # Drop the views before any segment can run again.
    return result

  def quantize_input(self, x_float: np.ndarray) -> np.ndarray:
    scale, zp = self.input_quant
    return np.clip(np.round(x_float / scale) + zp, -128, 127).astype(np.int8)

  def dequantize_output(self, y: np.ndarray) -> np.ndarray:
    scale, zp = self.output_quant
    return (y.astype(np.float32) - zp) * np.float32(scale)
