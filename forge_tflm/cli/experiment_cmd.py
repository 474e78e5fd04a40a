"""Run one of the paper's experiments and write results/NAME/ (JSON, Markdown, PNG).

`forge_tflm experiment NAME --data_dir=DIR`. The bundled models are converted on first
use (kept in --artifact_dir); the units run on the chosen executor. result.json
records the command, the artifacts' hashes, the data source and the package versions;
result.md compares each figure with the paper's.
"""

from __future__ import annotations

import os

from absl import flags

from forge_tflm.cli.sweep_flags import define_sweep_flags, executor_from_flags

POSITIONAL = "name"


def define_flags(fv: flags.FlagValues) -> flags.FlagValues:
  from forge_tflm.experiments import EXPERIMENTS

  flags.DEFINE_string("name", None, f"Experiment: {', '.join(EXPERIMENTS)} (also the"
                      " positional argument).", flag_values=fv)
  flags.DEFINE_string("data_dir", None, "Local dataset path; unset: tensorflow-datasets.",
                      flag_values=fv)
  flags.DEFINE_string("output_root", "results", "Results go to <output_root>/NAME/.",
                      flag_values=fv)
  flags.DEFINE_string("artifact_dir", "runs/experiments", "Where converted bundled models"
                      " are kept between runs.", flag_values=fv)
  flags.DEFINE_integer("images", 0, "Images per evaluation stream (0: the whole split).",
                       lower_bound=0, flag_values=fv)
  flags.DEFINE_multi_string("dataset_dir", [], "NAME=PATH: where dataset NAME (cifar100,"
                            " tiny_imagenet) is; default: the folder NAME beside"
                            " --data_dir.", flag_values=fv)
  flags.DEFINE_integer("train_epochs", None, "Epochs for models an experiment must train"
                       " (generalization); default: forge_tflm train's.", lower_bound=1,
                       flag_values=fv)
  from forge_tflm.artifact import TARGET_SOURCES

  flags.DEFINE_enum("targets", None, list(TARGET_SOURCES), "FORGE's clean targets in the"
                    " models the experiment converts (convert --targets); unset: the"
                    " converter's default (measured). recorded: the paper's design.",
                    flag_values=fv)
  define_sweep_flags(fv)
  return fv


def run(fv: flags.FlagValues, command: str) -> int:
  from forge_tflm.experiments import EXPERIMENTS, ExperimentContext, run_experiment

  if not fv.name:
    raise ValueError(f"name an experiment: {', '.join(EXPERIMENTS)}")
  if fv.name not in EXPERIMENTS:
    raise ValueError(f"unknown experiment {fv.name!r}; known: {', '.join(EXPERIMENTS)}")
  if fv.data_dir and not os.path.exists(fv.data_dir):
    raise ValueError(f"--data_dir {fv.data_dir!r} does not exist")
  dataset_dirs = {}
  for item in fv.dataset_dir:
    name, sep, path = item.partition("=")
    if not sep or not name or not path:
      raise ValueError(f"--dataset_dir={item!r}: expected NAME=PATH")
    dataset_dirs[name] = path
  train = {"epochs": fv.train_epochs} if fv.train_epochs else {}
  convert = {"targets": fv.targets} if fv.targets else {}
  ctx = ExperimentContext(fv.data_dir, fv.output_root, fv.artifact_dir,
                          executor_from_flags(fv), command, fv.images,
                          dataset_dirs=dataset_dirs, train=train, convert=convert)
  out = run_experiment(fv.name, ctx)
  with open(os.path.join(out, "result.md")) as f:
    print(f.read(), end="")
  written = [f for f in ("result.json", "result.md", "result.png")
             if os.path.exists(os.path.join(out, f))]
  print(f"wrote {out}/: {', '.join(written)}")
  return 0
