"""`generalization` (the paper's Table 5): FORGE on other models and datasets.

Rows: MobileNetV2-0.5 on CIFAR-10 (bundled), ResNet-20 on CIFAR-100 and MobileNetV2-0.5
on Tiny-ImageNet. A row runs when its dataset is present (ExperimentContext.dataset_dir:
by default the folder of that name beside --data_dir, any layout the loaders read);
a model that is not bundled is trained first with the standard recipe
(`forge_tflm train`'s defaults, overridable through ExperimentContext.train) and kept
in the artifact folder. Each model is converted with the default options and
evaluated (source, forge, forge-gated) on the dataset's 15 generated corruptions at
severity 5 (test split; Tiny-ImageNet: val), batch 64, one shuffled ordering. A row
whose dataset is missing says so and what would run it.
"""

from __future__ import annotations

import dataclasses
import os

from absl import logging

from forge_tflm.experiments.common import (BUNDLED_MODELS, ExperimentContext, Outcome,
                                           converted_artifact, evaluate, grouped_bars)

IMAGES = 2000  # per stream unless --images


@dataclasses.dataclass(frozen=True)
class Row:
  title: str
  model: str  # forge_tflm.models name
  dataset: str
  bundled: str | None = None  # key of BUNDLED_MODELS

  @property
  def eval_split(self) -> str:
    return "val" if self.dataset == "tiny_imagenet" else "test"


ROWS = (Row("MobileNetV2-0.5 on CIFAR-10", "mobilenet_v2_0.5", "cifar10",
            "mobilenet_v2_0.5_cifar10"),
        Row("ResNet-20 on CIFAR-100", "resnet20", "cifar100"),
        Row("MobileNetV2-0.5 on Tiny-ImageNet", "mobilenet_v2_0.5", "tiny_imagenet"))


def _model(ctx: ExperimentContext, row: Row, train_set, test_set) -> str:
  if row.bundled:
    return BUNDLED_MODELS[row.bundled]
  from forge_tflm.training.train import TrainConfig, train  # pylint: disable=import-outside-toplevel

  path = os.path.join(ctx.artifact_dir, f"{row.model}_{row.dataset}.keras")
  if not os.path.exists(path):
    config = TrainConfig(model=row.model, **ctx.train)
    logging.info("training %s on %s (%s) -> %s", row.model, row.dataset, config, path)
    train(config, train_set, test_set, path, command="forge_tflm experiment generalization",
          checkpoint_dir=path + ".ckpt")
  return path


def _run_row(ctx: ExperimentContext, row: Row) -> dict:
  from forge_tflm.data import DatasetFormatError, DatasetNotFoundError, load_dataset  # pylint: disable=import-outside-toplevel
  from forge_tflm.evaluation.protocol import EvalConfig  # pylint: disable=import-outside-toplevel
  from forge_tflm.corruptions import CORRUPTIONS  # pylint: disable=import-outside-toplevel
  from forge_tflm.evaluation.streams import generated_streams  # pylint: disable=import-outside-toplevel

  where = ctx.dataset_dir(row.dataset)
  try:
    train_set = load_dataset(row.dataset, "train", where)
    test_set = load_dataset(row.dataset, row.eval_split, where)
  except (DatasetNotFoundError, DatasetFormatError, FileNotFoundError) as e:
    return {"ran": False, "reason": f"{row.dataset} not available at"
            f" {where or 'tensorflow-datasets'}: {str(e).splitlines()[0][:200]}"}
  keras_path = _model(ctx, row, train_set, test_set)
  artifact = converted_artifact(ctx, keras_path, row.dataset)
  clean = test_set.random_subset(ctx.images or IMAGES, 0)
  streams = list(generated_streams(clean, CORRUPTIONS, 5))
  doc = evaluate(ctx, EvalConfig(methods=("source", "forge", "forge-gated")), streams,
                 artifact)
  res = doc["results"]
  return {"ran": True, "model": keras_path, "artifact": artifact,
          "images_per_stream": int(len(clean.labels)), "classes": len(test_set.class_names),
          "source": res["source"]["summary"]["mean_accuracy"],
          "forge": res["forge"]["summary"]["mean_accuracy"],
          "forge_recovery": res["forge"]["summary"]["mean_recovery"],
          "forge_hurt": len(res["forge"]["summary"]["hurt"]),
          "gated": res["forge-gated"]["summary"]["mean_accuracy"],
          "gated_recovery": res["forge-gated"]["summary"]["mean_recovery"],
          "gated_hurt": len(res["forge-gated"]["summary"]["hurt"]),
          "per_corruption": {s: {m: res[m]["streams"][s]["accuracy_mean"] for m in res}
                             for s in res["source"]["streams"]}}


def run(ctx: ExperimentContext) -> Outcome:
  rows = {row.title: _run_row(ctx, row) for row in ROWS}
  lines = ["# generalization: other models and datasets (paper Table 5)", "",
           "15 generated corruptions at severity 5, batch 64, one shuffled ordering; each"
           " model converted with the default options. Recovery against the int8"
           " source.", "",
           "| model / dataset | images per corruption | int8 source | FORGE (recovery,"
           " hurt) | FORGE + gate (recovery, hurt) |", "| --- | ---: | ---: | ---: | ---: |"]
  for title, r in rows.items():
    if not r["ran"]:
      lines.append(f"| {title} | not run: {r['reason']} | | | |")
      continue
    lines.append(f"| {title} | {r['images_per_stream']} | {r['source']:.2f} |"
                 f" {r['forge']:.2f} ({r['forge_recovery']:+.2f}, {r['forge_hurt']}/15) |"
                 f" {r['gated']:.2f} ({r['gated_recovery']:+.2f}, {r['gated_hurt']}/15) |")
  lines += ["", "A row that did not run needs its dataset in one of the layouts the"
            " loaders read (README, Datasets) beside --data_dir or given with"
            " --dataset_dir=NAME=PATH; its model is then trained with `forge_tflm train`'s"
            " recipe (hours on a CPU). The paper's Table 5 values are not available in"
            " this checkout."]
  artifacts = tuple(r["artifact"] for r in rows.values() if r["ran"])
  groups = {title: {"FORGE": r["forge_recovery"], "FORGE + gate": r["gated_recovery"]}
            for title, r in rows.items() if r["ran"]}
  return Outcome({"rows": rows}, "\n".join(lines), lambda p: grouped_bars(
      p, groups, "recovery (points)", "against each model's int8 source", size=(6, 3.4)),
      artifacts)
