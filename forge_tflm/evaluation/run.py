"""One evaluation run from files to reports (what `forge_tflm eval` calls)."""

from __future__ import annotations

import dataclasses
import pickle
import time

import numpy as np

from absl import logging

from forge_tflm.artifact import Artifact, InputContract
from forge_tflm.evaluation import checks, report
from forge_tflm.evaluation import resume as resume_store
from forge_tflm.evaluation.gate import settings as gate_settings
from forge_tflm.fileio import file_sha256
from forge_tflm.evaluation.protocol import (FP32_NAMES, INT8_NAMES, EvalConfig,
                                            build_methods, evaluate_stream,
                                            Stream, images_to_run, merge_records,
                                            reset_methods)


def run_evaluation(config: EvalConfig, streams: list, *, artifact_path: str | None,
                   keras_path: str | None, output_dir: str | None, command: str,
                   data_description: str, show_progress: bool = True,
                   resume: bool = False, executor=None,
                   hurt_threshold: float = report.HURT_POINTS) -> dict:
  """Evaluates, writes results.{json,csv,md,png} to output_dir; returns the JSON doc.

  With output_dir, each finished stream's results are saved at once
  (forge_tflm.evaluation.resume), so an interrupted run keeps them; `resume`
  loads the streams an earlier, interrupted run of the same configuration
  finished and evaluates only the others (a different configuration is refused).
  Without `resume`, an unfinished earlier run in output_dir is refused, not
  overwritten. The JSON doc's "resume" says which streams came from earlier runs.

  executor (forge_tflm.sweep; default inline): where the streams run, one unit per
  stream. Results do not depend on it: each stream resets every method, and its
  orders are drawn here.

  hurt_threshold: points under its source at which a method counts as hurting a
  stream (report.hurt_streams); it only labels results, so resume ignores it.
  """
  artifact = check_inputs(config, artifact_path, keras_path, output_dir)
  if resume and not output_dir:
    raise ValueError("resuming needs the output directory of the earlier run")
  if not (keras_path and any(m in FP32_NAMES for m in config.methods)):
    keras_path = None  # No float method: the Keras model is not loaded.
  meta = _meta(config, artifact, artifact_path, keras_path, command, data_description)
  names = [s.name for s in streams]
  if len(set(names)) != len(names):
    raise ValueError(f"stream names repeat: {names}")
  store = _store(output_dir, meta, streams) if output_dir else None
  float_model = _load_keras(keras_path) if keras_path else None
  contract = artifact.input_contract if artifact else InputContract()
  done = store.start(resume) if store is not None else {}
  todo = [s for s in streams if s.name not in done]
  if done:
    logging.info("resuming %s: %d stream(s) finished earlier (%s), %d to evaluate",
                 store.dir, len(done), ", ".join(done), len(todo))
  records = dict(done)

  def finished(record):
    if store is not None:
      store.save(record)
    records[record["stream"]] = record

  t0 = time.time()
  progress = _progress_bar(images_to_run(config, todo)) if show_progress and todo else None
  try:
    if todo and (executor is None or executor.name == "inline" or len(todo) == 1):
      _evaluate_here(config, todo, artifact, float_model, contract, progress, finished)
    elif todo:
      _evaluate_in_units(config, todo, artifact_path, keras_path, executor, progress,
                         finished)
  finally:
    if progress is not None:
      progress.close()
  raw = merge_records(config.methods, [records[n] for n in names])
  meta["wall_seconds"] = round(time.time() - t0, 1)
  meta["streams"] = {s.name: len(s.labels) for s in streams}
  meta["stream_orders"] = {s.name: s.spec for s in streams}
  meta["resume"] = {"resumed": bool(done), "streams_from_earlier_runs": list(done),
                    "streams_evaluated_now": [s.name for s in todo]}
  return _document(raw, meta, output_dir, store, hurt_threshold)


def _meta(config, artifact, artifact_path, keras_path, command, data_description) -> dict:
  """What results.json says the run was: command, data, artifact and float model (with
  their hashes), configuration."""
  meta: dict = {"command": command, "data": data_description}
  if artifact is not None:
    meta["artifact"] = {"path": artifact_path, "sha256": artifact.sha256}
  if keras_path:
    meta["float_model"] = {"path": keras_path, "sha256": file_sha256(keras_path)}
  meta["config"] = _config_json(config)
  return meta


def _store(output_dir: str, meta: dict, streams: list) -> "resume_store.ResultStore":
  """The output directory's per-stream results, keyed by what the results are of."""
  fingerprint = {"artifact_sha256": meta.get("artifact", {}).get("sha256"),
                 "float_model_sha256": meta.get("float_model", {}).get("sha256"),
                 "config": meta["config"], "data": meta["data"],
                 "streams": [{"name": s.name, "images": int(len(s.labels)),
                              "sha256": resume_store.stream_digest(s),
                              "order": s.spec, "domains": list(s.domain_names)}
                             for s in streams]}
  return resume_store.ResultStore(output_dir, fingerprint, [s.name for s in streams])


def _progress_bar(total: int):
  import sys

  from tqdm import tqdm

  # In logs (not a terminal) a redraw every 10 s is plenty.
  return tqdm(total=total, unit="img", desc="eval", smoothing=0.05,
              mininterval=0.5 if sys.stderr.isatty() else 10.0)


def _evaluate_here(config, todo, artifact, float_model, contract, progress, finished):
  """The streams in this process, one after the other, each method built once."""
  methods = build_methods(config, artifact, float_model, contract)
  try:
    for stream in todo:
      finished(evaluate_stream(config, methods, stream, contract, progress))
  finally:
    reset_methods(methods)


def _evaluate_in_units(config, todo, artifact_path, keras_path, executor, progress,
                       finished):
  """One executor unit per stream, its orders drawn here (results do not depend on
  where a unit runs)."""
  units = [StreamUnit(config, artifact_path, keras_path, _with_fixed_orders(s, config))
           for s in todo]
  per_image = images_to_run(config, todo[:1]) / len(todo[0].labels)

  def on_result(i, record):
    finished(record)
    if progress is not None:
      progress.update(round(per_image * len(todo[i].labels)))

  executor.map(evaluate_unit, units, on_result)


def _document(raw: dict, meta: dict, output_dir, store, hurt_threshold: float) -> dict:
  """The reports written to output_dir (and the run marked complete); the JSON doc."""
  table = report.summarize(raw, hurt_threshold)
  if output_dir:
    paths = report.write_all(output_dir, table, meta, raw)
    store.finish()
    logging.info("wrote %s", ", ".join(paths.values()))
  doc = dict(meta, results=table, gate=raw["gate"], seconds=raw["seconds"])
  if raw.get("gate_periodic"):
    doc["gate_periodic"] = raw["gate_periodic"]
  if raw["domains"]:  # Streams that cross domains: accuracy per domain inside them.
    doc["domains"] = raw["domains"]
  return doc


def check_inputs(config: EvalConfig, artifact_path: str | None, keras_path: str | None,
                 output_dir: str | None):
  """Everything run_evaluation can check before expensive work, each failure one
  line naming its file: the artifact (and, for the methods asked for, its FORGE
  ops and the op's size limit at the batch size), the float model, the output
  directory. Returns the loaded Artifact (or None)."""
  int8 = [m for m in config.methods if m in INT8_NAMES]
  fp32 = [m for m in config.methods if m in FP32_NAMES]
  if int8 and not artifact_path:
    raise ValueError(f"method(s) {', '.join(int8)} need the int8 artifact (.tflite)")
  if fp32 and not keras_path:
    raise ValueError(f"method(s) {', '.join(fp32)} need the float Keras model (.keras)")
  artifact = None
  if artifact_path:
    artifact = checks.load_artifact(artifact_path)
    checks.check_artifact(artifact, config.methods, config.batch_size)
  if keras_path and fp32:
    checks.check_input_file(keras_path, "float model")
  checks.check_outputs(output_dir)
  return artifact


@dataclasses.dataclass(frozen=True)
class FixedOrders:
  """A stream's presentation orders, drawn in the parent (a picklable order_fn)."""
  orders: tuple

  def __call__(self, k: int, seed: int) -> np.ndarray:
    del seed  # Drawn with it already.
    return self.orders[k]


def _with_fixed_orders(stream: Stream, config: EvalConfig) -> Stream:
  orders = tuple(stream.order(k, config.ordering_seed) for k in range(config.orderings))
  return dataclasses.replace(stream, order_fn=FixedOrders(orders))


@dataclasses.dataclass(frozen=True)
class StreamUnit:
  """One stream for a worker: everything evaluate_stream needs, by value."""
  config: EvalConfig
  artifact_path: str | None
  keras_path: str | None
  stream: Stream


# Per worker process: the methods of the last (config, artifact, float model) seen,
# built once and reused for every stream that worker gets.
_WORKER_METHODS: dict = {}


def evaluate_unit(unit: StreamUnit) -> dict:
  """The sweep function of an evaluation: one stream's record."""
  key = pickle.dumps((unit.config, unit.artifact_path, unit.keras_path))
  if key not in _WORKER_METHODS:
    _WORKER_METHODS.clear()
    artifact = checks.load_artifact(unit.artifact_path) if unit.artifact_path else None
    float_model = None
    if unit.keras_path:
      from forge_tflm.quiet import hide_framework_logs, import_quietly  # pylint: disable=import-outside-toplevel
      hide_framework_logs(True)
      import_quietly("tensorflow", "keras")
      float_model = _load_keras(unit.keras_path)
    contract = artifact.input_contract if artifact else InputContract()
    _WORKER_METHODS[key] = (build_methods(unit.config, artifact, float_model, contract),
                            contract)
  methods, contract = _WORKER_METHODS[key]
  try:
    return evaluate_stream(unit.config, methods, unit.stream, contract)
  finally:
    reset_methods(methods)


def _load_keras(path: str):
  import keras
  try:
    return keras.saving.load_model(path, compile=False)
  except Exception as e:  # Keras raises many types (zip, JSON, config) for a bad file.
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    raise ValueError(f"float model {path}: cannot load it ({type(e).__name__}:"
                     f" {first[:200]})") from e


def _config_json(config: EvalConfig) -> dict:
  """The configuration as results.json records it, the gate's defaults filled in."""
  d = dataclasses.asdict(config)
  d["methods"] = list(config.methods)
  d["gate"] = gate_settings(config.gate)  # As used.
  return d
