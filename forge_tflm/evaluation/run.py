"""One evaluation run from files to reports (what `forge_tflm eval` calls)."""

from __future__ import annotations

import dataclasses
import time

from absl import logging

from forge_tflm.artifact import Artifact, InputContract
from forge_tflm.evaluation import checks, report
from forge_tflm.evaluation import resume as resume_store
from forge_tflm.fileio import file_sha256
from forge_tflm.evaluation.protocol import (FP32_NAMES, INT8_NAMES, EvalConfig,
                                            build_methods, evaluate_stream,
                                            images_to_run, merge_records, reset_methods)


def run_evaluation(config: EvalConfig, streams: list, *, artifact_path: str | None,
                   keras_path: str | None, output_dir: str | None, command: str,
                   data_description: str, show_progress: bool = True,
                   clean_images=None, resume: bool = False) -> dict:
  """Evaluates, writes results.{json,csv,md,png} to output_dir; returns the JSON doc.

  clean_images (uint8, uncorrupted, unlabeled) give the confidence_drop gate its
  reference when the config does not set one.

  With output_dir, each finished stream's results are saved at once
  (forge_tflm.evaluation.resume), so an interrupted run keeps them; `resume`
  loads the streams an earlier, interrupted run of the same configuration
  finished and evaluates only the others (a different configuration is refused).
  Without `resume`, an unfinished earlier run in output_dir is refused, not
  overwritten. The JSON doc's "resume" says which streams came from earlier runs.
  """
  artifact = check_inputs(config, artifact_path, keras_path, output_dir)
  if resume and not output_dir:
    raise ValueError("resuming needs the output directory of the earlier run")
  meta: dict = {"command": command, "data": data_description}
  if artifact is not None:
    meta["artifact"] = {"path": artifact_path, "sha256": artifact.sha256}
  needs_float = keras_path and any(m in FP32_NAMES for m in config.methods)
  if needs_float:
    meta["float_model"] = {"path": keras_path, "sha256": file_sha256(keras_path)}
  names = [s.name for s in streams]
  if len(set(names)) != len(names):
    raise ValueError(f"stream names repeat: {names}")
  store = None
  done: dict = {}
  if output_dir:
    fingerprint = {"artifact_sha256": meta.get("artifact", {}).get("sha256"),
                   "float_model_sha256": meta.get("float_model", {}).get("sha256"),
                   "config": _config_json(config), "data": data_description,
                   "streams": [{"name": s.name, "images": int(len(s.labels)),
                                "sha256": resume_store.stream_digest(s),
                                "order": s.spec} for s in streams]}
    store = resume_store.ResultStore(output_dir, fingerprint, names)
  float_model = None
  if needs_float:
    float_model = _load_keras(keras_path)
  contract = artifact.input_contract if artifact else InputContract()
  if "forge-gated" in config.methods and config.gate.needs_reference:
    config = _with_gate_reference(config, artifact, contract, clean_images)
  meta["config"] = _config_json(config)
  if store is not None:
    done = store.start(resume)
  todo = [s for s in streams if s.name not in done]
  if done:
    logging.info("resuming %s: %d stream(s) finished earlier (%s), %d to evaluate",
                 store.dir, len(done), ", ".join(done), len(todo))
  total = images_to_run(config, todo)
  progress = None
  if show_progress and todo:
    from tqdm import tqdm
    import sys
    # In logs (not a terminal) a redraw every 10 s is plenty.
    progress = tqdm(total=total, unit="img", desc="eval", smoothing=0.05,
                    mininterval=0.5 if sys.stderr.isatty() else 10.0)
  t0 = time.time()
  records = dict(done)
  try:
    if todo:
      methods = build_methods(config, artifact, float_model, contract)
      try:
        for stream in todo:
          record = evaluate_stream(config, methods, stream, contract, progress)
          if store is not None:
            store.save(record)
          records[stream.name] = record
      finally:
        reset_methods(methods)
  finally:
    if progress is not None:
      progress.close()
  raw = merge_records(config.methods, [records[n] for n in names])
  meta["wall_seconds"] = round(time.time() - t0, 1)
  meta["streams"] = {s.name: len(s.labels) for s in streams}
  meta["stream_orders"] = {s.name: s.spec for s in streams}
  meta["resume"] = {"resumed": bool(done), "streams_from_earlier_runs": list(done),
                    "streams_evaluated_now": [s.name for s in todo]}
  table = report.summarize(raw)
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


def _load_keras(path: str):
  import keras
  try:
    return keras.saving.load_model(path, compile=False)
  except Exception as e:  # Keras raises many types (zip, JSON, config) for a bad file.
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    raise ValueError(f"float model {path}: cannot load it ({type(e).__name__}:"
                     f" {first[:200]})") from e


def _with_gate_reference(config: EvalConfig, artifact: Artifact | None, contract,
                         clean_images) -> EvalConfig:
  from forge_tflm.evaluation.gate import clean_reference
  from forge_tflm.runtime.segmented import SegmentedModel

  if clean_images is None or artifact is None:
    raise ValueError("the confidence_drop gate needs the source's mean confidence on"
                     " clean data: pass --gate_reference, or evaluate generated"
                     " corruptions (their clean split gives it)")
  model = SegmentedModel.from_artifact(artifact, config.kernels)
  reference = clean_reference(model, model.quantize_input(contract.to_float(clean_images)))
  logging.info("gate reference: source mean top-1 confidence %.4f on %d clean images",
               reference, len(clean_images))
  return dataclasses.replace(config, gate=dataclasses.replace(config.gate,
                                                              reference=reference))


def _config_json(config: EvalConfig) -> dict:
  d = dataclasses.asdict(config)
  d["methods"] = list(config.methods)
  # The probe length as used (its default depends on the batch size).
  d["gate"]["warmup_batches"] = config.gate.batches(config.batch_size)
  d["gate"]["delta"] = config.gate.margin
  return d
