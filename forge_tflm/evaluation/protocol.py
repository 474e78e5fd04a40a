"""The evaluation protocol: streams, orderings, batches, methods.

By default each corruption is its own stream, shuffled (the shared copies are sorted
by class, and an unshuffled stream is label-shifted, which breaks any BN-style
method); field_streams.py builds the other protocols (continual, gradual, mixed,
label-correlated orders). K orderings (seeds) give mean +- std. Every method sees the
same orderings and resets its state at the start of each stream.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterable

import numpy as np

from forge_tflm.evaluation.fp32_methods import FP32_METHODS
from forge_tflm.evaluation.gate import GateConfig, GatedForge
from forge_tflm.evaluation.int8_methods import INT8_METHODS
from forge_tflm.ops import RecalibOptions

INT8_NAMES = ("source", "forge", "forge-gated", "scale-adapt")
FP32_NAMES = ("source-fp32", "bn-adapt", "tent")
ALL_METHODS = INT8_NAMES + FP32_NAMES
_METHOD_CLASSES = {**INT8_METHODS, GatedForge.name: GatedForge, **FP32_METHODS}
# The baseline each method's recovery is measured against.
SOURCE_OF = {"source": "source", "forge": "source", "forge-gated": "source",
             "scale-adapt": "source", "source-fp32": "source-fp32",
             "bn-adapt": "source-fp32", "tent": "source-fp32"}


@dataclasses.dataclass(frozen=True)
class Stream:
  """Images a method sees without a reset, and how they are presented.

  domains/domain_names: the domain of each image, for streams that cross domains
  (field_streams: continual, gradual, mixed); results are also reported per domain.
  order_fn(k, seed): the presentation order of ordering k; default: shuffled.
  spec: how the stream is ordered, in words (recorded with the results).
  """
  name: str
  images: np.ndarray  # uint8 [N,H,W,3]
  labels: np.ndarray  # int64 [N]
  domains: np.ndarray | None = None
  domain_names: tuple[str, ...] = ()
  order_fn: Callable[[int, int], np.ndarray] | None = None
  spec: str = "shuffled"

  def order(self, k: int, seed: int) -> np.ndarray:
    if self.order_fn is None:
      return ordering(len(self.labels), k, seed)
    order = np.asarray(self.order_fn(k, seed))
    if len(order) != len(self.labels):
      raise ValueError(f"stream {self.name}: its order has {len(order)} images, not "
                       f"{len(self.labels)}")
    return order


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  methods: tuple[str, ...] = ("source", "forge")
  batch_size: int = 64
  orderings: int = 1
  ordering_seed: int = 0
  kernels: str = "optimized"
  gate: GateConfig = GateConfig()
  # Host-side overrides of the artifact's FORGE options (RecalibOptions fields).
  option_overrides: dict = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    unknown = [m for m in self.methods if m not in ALL_METHODS]
    if unknown:
      raise ValueError(f"unknown method(s) {unknown}; known: {', '.join(ALL_METHODS)}")
    if self.batch_size < 1 or self.orderings < 1:
      raise ValueError("batch_size and orderings must be >= 1")
    # Checked now, on any valid options, so a bad override fails before the run.
    RecalibOptions(window=1).replace(**self.option_overrides)


def ordering(n: int, k: int, seed: int) -> np.ndarray:
  """The k-th shuffled order of a stream of n images (same for every method)."""
  return np.random.default_rng([seed, k]).permutation(n)


def run_stream(predict: Callable[[np.ndarray], np.ndarray], inputs: np.ndarray,
               labels: np.ndarray, order: np.ndarray, batch_size: int,
               on_batch: Callable[[int], None] | None = None,
               hits: np.ndarray | None = None) -> float:
  """Accuracy over the stream presented in `order`; `hits` (bool [N], optional)
  receives per image (by index into inputs) whether it was classified right."""
  correct = 0
  for start in range(0, len(order), batch_size):
    idx = order[start:start + batch_size]
    logits = predict(inputs[idx])
    right = np.argmax(logits, axis=1) == labels[idx]
    correct += int(np.sum(right))
    if hits is not None:
      hits[idx] = right
    if on_batch:
      on_batch(len(idx))
  return correct / len(order)


def build_methods(config: EvalConfig, artifact, float_model, contract):
  """name -> method object; int8 methods each get their own SegmentedModel."""
  from forge_tflm.evaluation.int8_methods import override_options
  from forge_tflm.runtime.segmented import SegmentedModel

  methods = {}
  for name in config.methods:
    if name in INT8_NAMES:
      if artifact is None:
        raise ValueError(f"method {name} needs the int8 artifact (.tflite)")
      model = SegmentedModel.from_artifact(artifact, config.kernels)
      override_options(model, **config.option_overrides)
      methods[name] = _METHOD_CLASSES[name].create(model, config)
    else:
      if float_model is None:
        raise ValueError(f"method {name} needs the float Keras model")
      methods[name] = FP32_METHODS[name](float_model, contract)
  return methods


def images_to_run(config: EvalConfig, streams: Iterable[Stream]) -> int:
  """How many images evaluate() will push through all methods (for progress)."""
  adaptive = sum(config.orderings if _is_adaptive(m) else 1 for m in config.methods)
  return sum(len(s.labels) for s in streams) * adaptive


def _is_adaptive(name: str) -> bool:
  return _METHOD_CLASSES[name].adaptive


def evaluate(config: EvalConfig, streams: Iterable[Stream], *, artifact,
             float_model, contract, progress=None) -> dict:
  """Runs every method over every stream and ordering; returns raw results.

  artifact: the int8 model (a forge_tflm.artifact.Artifact, or its bytes), or None
  when only float methods run.

  Returns {"accuracy": {method: {stream: [acc per ordering]}},
           "gate": {stream: [fired per ordering]}, "gate_score": {...},
           "seconds": {method: total}}.
  """
  methods = build_methods(config, artifact, float_model, contract)
  try:
    records = [evaluate_stream(config, methods, stream, contract, progress)
               for stream in streams]
  finally:
    reset_methods(methods)
  return merge_records(list(methods), records)


def reset_methods(methods: dict) -> None:
  for method in methods.values():
    method.reset()  # Leave the float model as it came (adaptation mutates it).


def evaluate_stream(config: EvalConfig, methods: dict, stream: Stream, contract,
                    progress=None) -> dict:
  """Every method (from build_methods) over one stream, every ordering.

  Returns the stream's record, JSON-ready (what evaluation runs save per finished
  stream): {"stream", "images", "accuracy": {method: [acc per ordering]},
  each method's diagnostics() per ordering (forge-gated: "gate_fired", "gate_score",
  "gate_correlated", with a gate period "gate_adapted", "gate_probed",
  "gate_decisions"), "seconds": {method}}.
  Each method's state is reset at the start of every ordering, so a stream's
  record does not depend on the streams evaluated before it.
  """
  record: dict = {"stream": stream.name, "images": int(len(stream.labels)),
                  "order": stream.spec, "accuracy": {}, "seconds": {}}
  inputs_int8 = None
  for name, method in methods.items():
    if name in INT8_NAMES:
      if inputs_int8 is None:
        inputs_int8 = method.model.quantize_input(contract.to_float(stream.images))
      inputs = inputs_int8
    else:
      inputs = stream.images
    accs = []
    seconds = 0.0
    # A method that does not adapt predicts each image independently of the
    # others, so every ordering gives the same accuracy: run it once.
    runs = config.orderings if method.adaptive else 1
    hits = np.zeros(len(stream.labels), bool)
    per_domain: dict[str, list[float]] = {d: [] for d in stream.domain_names}
    for k in range(runs):
      order = stream.order(k, config.ordering_seed)
      method.reset()
      t0 = time.perf_counter()
      accs.append(float(run_stream(method.predict, inputs, stream.labels, order,
                                   config.batch_size,
                                   progress.update if progress is not None else None,
                                   hits=hits)))
      seconds += time.perf_counter() - t0
      for d, domain in enumerate(stream.domain_names):
        per_domain[domain].append(float(hits[stream.domains == d].mean()))
      for key, value in method.diagnostics().items():
        record.setdefault(key, []).append(value)
    record["accuracy"][name] = accs * (config.orderings // runs)
    record["seconds"][name] = seconds
    if stream.domain_names:
      record.setdefault("domain_accuracy", {})[name] = {
          d: v * (config.orderings // runs) for d, v in per_domain.items()}
  return record


def merge_records(method_names: Iterable[str], records: Iterable[dict]) -> dict:
  """Per-stream records (in stream order) -> evaluate()'s raw results."""
  method_names = list(method_names)
  accuracy = {m: {} for m in method_names}
  gate, gate_score, gate_adapted, domains = {}, {}, {}, {}
  seconds = {m: 0.0 for m in method_names}
  for r in records:
    if "domain_accuracy" in r:
      domains[r["stream"]] = r["domain_accuracy"]
    for m in method_names:
      accuracy[m][r["stream"]] = list(r["accuracy"][m])
      seconds[m] += r["seconds"][m]
    if "gate_fired" in r:
      gate[r["stream"]] = list(r["gate_fired"])
      gate_score[r["stream"]] = list(r["gate_score"])
    if "gate_adapted" in r:
      gate_adapted[r["stream"]] = {"adapted": list(r["gate_adapted"]),
                                   "probed": list(r.get("gate_probed", [])),
                                   "decisions": list(r["gate_decisions"])}
  raw = {"accuracy": accuracy, "gate": gate, "gate_score": gate_score, "seconds": seconds,
         "domains": domains}
  if gate_adapted:
    raw["gate_periodic"] = gate_adapted
  return raw
