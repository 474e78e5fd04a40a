"""What a device must print for an artifact and an image stream: the host evaluator's
outputs at batch 1 in `reference` kernel mode (TFLite-Micro / ESP-NN integer numerics),
adapting exactly as `forge_tflm eval --batch_size=1 --kernels=reference` does.

  exp = expected_outputs("runs/r20_forge.tflite", inputs_int8, trace="all")
  exp.logits[n]          # int8 logits of image n (after images 0..n-1 adapted FORGE)
  exp.predictions[n]     # argmax (first maximum)
  exp.forge_checksums[n] # checksum of each FORGE op's output (model order)
  exp.op_checksums[n]    # trace="all": checksum of every op's output
  exp.op_outputs[n][k]   # keep_outputs=True: the int8 output tensor of op k

The checksum is the application core's (esp32s3_app/core/forge_app.h).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from forge_tflm import tflite_graph as tg

TRACES = ("none", "forge", "all")


def checksum(data: np.ndarray) -> int:
  """ForgeAppChecksum: sum_i byte_i * (((i * 2654435761) mod 2^32) | 1) mod 2^32."""
  b = np.ascontiguousarray(data).view(np.uint8).ravel().astype(np.uint64)
  i = np.arange(b.size, dtype=np.uint64)
  w = ((i * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)) | np.uint64(1)
  return int(np.sum(b * w, dtype=np.uint64) & np.uint64(0xFFFFFFFF))


def device_state(node) -> np.ndarray:
  """A FORGE node's state as the app checksums its buffer: float32 [mu, var] (int32
  with arithmetic int: its bytes as they are, never converted)."""
  return np.ascontiguousarray(node.state.data)


@dataclasses.dataclass
class ExpectedOutputs:
  logits: np.ndarray           # int8 [N, classes]
  predictions: np.ndarray      # int64 [N]
  op_names: list[str]          # per op of the model, in order
  forge_ops: list[int]         # op indices of the FORGE_RECALIB ops
  forge_checksums: np.ndarray  # uint32 [N, F] (F = 0 without FORGE or trace="none")
  op_checksums: np.ndarray | None = None   # uint32 [N, K] (trace="all")
  op_outputs: list | None = None           # [N][K] int8 arrays (keep_outputs)
  states: list | None = None               # [N][F] float32 [2C] after image n (keep_states)
  state_checksums: np.ndarray | None = None  # uint32 [N, F] (trace != "none")


def model_ops(model_bytes: bytes) -> list[str]:
  """Operator names of subgraph 0 in order (builtin names, custom codes)."""
  model = tg.load_model(model_bytes)
  return [tg.op_name(model, op) for op in model.subgraphs[0].operators]


def _read(artifact) -> bytes:
  if isinstance(artifact, (bytes, bytearray)):
    return bytes(artifact)
  with open(artifact, "rb") as f:
    return f.read()


class _Tracer:
  """Runs a SegmentedModel and reads every op's output after each image.

  Segment interpreters are created with preserve_all_tensors so that the outputs
  of ops inside a segment survive the invoke; FORGE outputs are captured through
  SegmentedModel.forge_kernel, which runs the same C core call as the default path.
  """

  def __init__(self, model, model_bytes: bytes):
    from ai_edge_litert.interpreter import Interpreter

    from forge_tflm.runtime import segmented

    self.model = model
    self.plan = []  # per original op: ("seg", bound, local tensor) or ("forge", node)
    self._forge_out = {}
    self._host_out = {}

    def kernel(node, x, mode):
      y = node.op(x, mode=mode)
      self._forge_out[id(node)] = y
      return y

    model.forge_kernel = kernel
    total = len(tg.load_model(model_bytes).subgraphs[0].operators)
    for k, (kind, step) in enumerate(model._steps):  # noqa: SLF001 (the evaluator's plan)
      if kind == "segment":
        seg_model = tg.load_model(step.model_bytes)
        it = Interpreter(model_content=step.model_bytes, num_threads=model.num_threads,
                         experimental_op_resolver_type=segmented.KERNEL_MODES[model.kernels],
                         experimental_preserve_all_tensors=True)
        ins = [d["index"] for d in it.get_input_details()]
        it.allocate_tensors()
        bound = segmented._Bound(it, ins, [d["index"] for d in it.get_output_details()])  # noqa: SLF001
        step.interpreters[1] = bound  # batch 1 uses this interpreter
        for op in seg_model.subgraphs[0].operators:
          self.plan.append(("seg", bound, int(op.outputs[0])))
      elif isinstance(step, segmented.ForgeNode):
        self.plan.append(("forge", step))
      elif isinstance(step, tuple) and len(step) == 4 and callable(step[1]):
        # A builtin run on the host (name, fn, t_in, t_out), e.g. TFLM's
        # FULLY_CONNECTED in reference mode: record what fn returns.
        self.plan.append(("host", len(self.plan)))
        model._steps[k] = (kind, self._recording(step, len(self.plan) - 1))  # noqa: SLF001
      else:
        raise ValueError(f"unsupported host step {step[0]!r}")
    if len(self.plan) != total:
      raise AssertionError(f"traced {len(self.plan)} ops, model has {total}")

  def _recording(self, step, slot: int):
    name, fn, t_in, t_out = step

    def record(x):
      y = fn(x)
      self._host_out[slot] = y
      return y

    return (name, record, t_in, t_out)

  def outputs(self) -> list[np.ndarray]:
    out = []
    for entry in self.plan:
      if entry[0] == "seg":
        out.append(np.array(entry[1].it.get_tensor(entry[2])))
      elif entry[0] == "host":
        out.append(np.array(self._host_out[entry[1]]))
      else:
        out.append(np.array(self._forge_out[id(entry[1])]))
    return out


def expected_outputs(artifact, inputs_int8: np.ndarray, *, mode: str = "adapt",
                     trace: str = "forge", kernels: str = "reference",
                     keep_outputs: bool = False, keep_states: bool = False) -> ExpectedOutputs:
  """Runs `inputs_int8` [N, H, W, C] (model input, already quantized) through the
  artifact at batch 1, image after image, as the evaluator's `forge` method (or
  `source` with mode="frozen"): FORGE state starts at the clean targets and carries
  over from image to image. artifact: a .tflite path or its bytes.
  """
  from forge_tflm.runtime.segmented import SegmentedModel

  if trace not in TRACES:
    raise ValueError(f"trace must be one of {TRACES}, not {trace!r}")
  model_bytes = _read(artifact)
  names = model_ops(model_bytes)
  forge_ops = [k for k, n in enumerate(names) if n == tg.FORGE_RECALIB]
  model = SegmentedModel(model_bytes, kernels)
  model.reset()
  tracer = _Tracer(model, model_bytes) if (trace != "none" or keep_outputs) else None
  if tracer is None and trace == "forge" and forge_ops:
    tracer = _Tracer(model, model_bytes)
  x = np.asarray(inputs_int8)
  if x.dtype != np.int8:
    raise ValueError(f"inputs must be int8 model input, got {x.dtype}")
  n_images = len(x)
  logits, forge_sums, op_sums, outputs, states, state_sums = [], [], [], [], [], []
  for n in range(n_images):
    y = model.run(x[n:n + 1], mode=mode)
    logits.append(y.reshape(-1))
    if tracer is not None:
      outs = tracer.outputs()
      if trace in ("forge", "all"):
        forge_sums.append([checksum(outs[k]) for k in forge_ops])
      if trace == "all":
        op_sums.append([checksum(o) for o in outs])
      if keep_outputs:
        outputs.append(outs)
    if keep_states or trace != "none":
      state = model.get_state()
      if keep_states:
        states.append(state)
      if trace != "none":
        state_sums.append([checksum(device_state(node)) for node in model.nodes])
  logits = np.stack(logits).astype(np.int8) if logits else np.zeros((0, 0), np.int8)
  return ExpectedOutputs(
      logits=logits,
      predictions=np.argmax(logits, axis=1) if n_images else np.zeros(0, np.int64),
      op_names=names, forge_ops=forge_ops,
      forge_checksums=np.array(forge_sums, np.uint32).reshape(n_images, -1)
      if trace in ("forge", "all") else np.zeros((n_images, 0), np.uint32),
      op_checksums=np.array(op_sums, np.uint32) if trace == "all" else None,
      op_outputs=outputs if keep_outputs else None,
      states=states if keep_states else None,
      state_checksums=np.array(state_sums, np.uint32).reshape(n_images, -1)
      if trace != "none" else None)


@dataclasses.dataclass
class ExpectedGated:
  logits: np.ndarray        # int8 [N, classes]: the logits of the path that predicted
  predictions: np.ndarray   # int64 [N]
  paths: list[str]          # per image: "source", "adapt" or "frozen" (its op mode)
  decisions: list[dict]     # per decision: image, on, score, correlated, agreement, chance


def expected_gated(artifact, inputs_int8: np.ndarray, gate, *,
                   kernels: str = "reference") -> ExpectedGated:
  """What a device running the gate (custom_ops/forge_controller, `config.gate`) must
  print: the evaluator's `forge-gated` method at batch 1 over `inputs_int8`
  (quantized model input), `gate` a forge_tflm.evaluation.gate.GateConfig."""
  from forge_tflm.evaluation.gate import GatedForge
  from forge_tflm.runtime.segmented import SegmentedModel

  model = SegmentedModel(_read(artifact), kernels)
  last = {}  # mode -> the int8 output of this image's pass in that mode
  run = model.run

  def recording_run(x, mode="adapt"):
    key = "adapt" if mode == "adapt_safe" else mode  # The device prints path=adapt.
    last[key] = run(x, mode)
    return last[key]

  model.run = recording_run
  gated = GatedForge(model, gate)
  x = np.asarray(inputs_int8)
  logits, paths, decisions = [], [], []
  for n in range(len(x)):
    probing, adapting = gated.probing, gated.adapting
    last.clear()
    gated.predict(x[n:n + 1])
    path = ("adapt" if adapting else "source") if probing else (
        "adapt" if adapting else "frozen")
    paths.append(path)
    logits.append(last[path].reshape(-1))
    if len(gated.decisions) > len(decisions):
      decisions.append({"image": n, "on": gated.decisions[-1],
                        "score": float(gated.last_score),
                        "correlated": bool(gated.last_correlated),
                        "agreement": float(gated.last_agreement),
                        "chance": float(gated.last_chance)})
  logits = np.asarray(logits, np.int8)
  return ExpectedGated(logits, np.argmax(logits, axis=1), paths, decisions)
