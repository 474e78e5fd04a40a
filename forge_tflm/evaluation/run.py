"""One evaluation run from files to reports (what `forge_tflm eval` calls)."""

from __future__ import annotations

import dataclasses
import time

from absl import logging

from forge_tflm.artifact import Artifact, InputContract
from forge_tflm.evaluation import report
from forge_tflm.fileio import file_sha256
from forge_tflm.evaluation.protocol import FP32_NAMES, EvalConfig, evaluate, images_to_run


def run_evaluation(config: EvalConfig, streams: list, *, artifact_path: str | None,
                   keras_path: str | None, output_dir: str | None, command: str,
                   data_description: str, show_progress: bool = True,
                   clean_images=None) -> dict:
  """Evaluates, writes results.{json,csv,md,png} to output_dir; returns the JSON doc.

  clean_images (uint8, uncorrupted, unlabeled) give the confidence_drop gate its
  reference when the config does not set one.
  """
  artifact = None
  meta: dict = {"command": command, "data": data_description}
  if artifact_path:
    artifact = Artifact.load(artifact_path)
    meta["artifact"] = {"path": artifact_path, "sha256": artifact.sha256}
  float_model = None
  if keras_path and any(m in FP32_NAMES for m in config.methods):
    import keras
    float_model = keras.saving.load_model(keras_path, compile=False)
    meta["float_model"] = {"path": keras_path, "sha256": file_sha256(keras_path)}
  contract = artifact.input_contract if artifact else InputContract()
  if "forge-gated" in config.methods and config.gate.needs_reference:
    config = _with_gate_reference(config, artifact, contract, clean_images)
  meta["config"] = _config_json(config)
  total = images_to_run(config, streams)
  progress = None
  if show_progress:
    from tqdm import tqdm
    import sys
    # In logs (not a terminal) a redraw every 10 s is plenty.
    progress = tqdm(total=total, unit="img", desc="eval", smoothing=0.05,
                    mininterval=0.5 if sys.stderr.isatty() else 10.0)
  t0 = time.time()
  try:
    raw = evaluate(config, streams, artifact=artifact, float_model=float_model,
                   contract=contract, progress=progress)
  finally:
    if progress is not None:
      progress.close()
  meta["wall_seconds"] = round(time.time() - t0, 1)
  meta["streams"] = {s.name: len(s.labels) for s in streams}
  table = report.summarize(raw)
  if output_dir:
    paths = report.write_all(output_dir, table, meta, raw)
    logging.info("wrote %s", ", ".join(paths.values()))
  doc = dict(meta, results=table, gate=raw["gate"], seconds=raw["seconds"])
  return doc


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
