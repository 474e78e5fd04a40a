"""Rank an artifact's FORGE sites and pick the few worth adapting (design time).

Each site's recovery when it alone adapts is measured on corruptions that are not the
evaluation ones (default: the generator's held-out speckle_noise, gaussian_blur,
spatter and saturate at severity 5 on training images); top-k or greedy selection
then writes a sites file that `forge_tflm convert --sites=@FILE` takes, with the
whole ranking and the command that made it. Prints the ranking as a Markdown table.
Give the artifact converted with all sites.
"""

from __future__ import annotations

import os

from absl import flags, logging

from forge_tflm.cli.sweep_flags import define_sweep_flags, executor_from_flags


def define_flags(fv: flags.FlagValues) -> flags.FlagValues:
  from forge_tflm.corruptions import ALL_CORRUPTIONS, HELD_OUT_CORRUPTIONS
  from forge_tflm.evaluation.selection import STRATEGIES, SelectConfig

  d = SelectConfig()
  flags.DEFINE_string("artifact", None, "Converted .tflite (all sites) with its manifest.",
                      flag_values=fv)
  flags.DEFINE_string("output", None, "Sites file to write (JSON; convert --sites=@FILE).",
                      flag_values=fv)
  flags.DEFINE_enum("strategy", d.strategy, list(STRATEGIES), "top-k: the k best sites"
                    " alone; greedy: k times, the site whose addition helps the set most.",
                    flag_values=fv)
  flags.DEFINE_integer("k", d.k, "Sites to select.", lower_bound=1, flag_values=fv)
  flags.DEFINE_list("corruptions", list(HELD_OUT_CORRUPTIONS), "Corruptions to rank on"
                    f" (any of {', '.join(ALL_CORRUPTIONS)}); the default four are held out"
                    " from evaluation.", flag_values=fv)
  flags.DEFINE_enum("dataset", d.dataset, ["cifar10", "cifar100", "tiny_imagenet"],
                    "Dataset of the clean images.", flag_values=fv)
  flags.DEFINE_string("data_dir", None, "Local dataset path; unset: tensorflow-datasets.",
                      flag_values=fv)
  flags.DEFINE_string("split", d.split, "Clean split to corrupt (a user-given split: any"
                      " split the dataset has).", flag_values=fv)
  flags.DEFINE_integer("images", d.images, "Random subset of the split (0: all).",
                       lower_bound=0, flag_values=fv)
  flags.DEFINE_integer("severity", d.severity, "Severity 1-5.", lower_bound=1,
                       upper_bound=5, flag_values=fv)
  flags.DEFINE_integer("batch_size", d.batch_size, "Batch size.", lower_bound=1,
                       flag_values=fv)
  define_sweep_flags(fv)
  return fv


def run(fv: flags.FlagValues, command: str) -> int:
  from forge_tflm.evaluation import checks
  from forge_tflm.evaluation.selection import (SelectConfig, ranking_table, select,
                                               write_sites_file)

  for name in ("artifact", "output"):
    if not fv[name].value:
      raise ValueError(f"--{name} is required")
  config = SelectConfig(strategy=fv.strategy, k=fv.k, corruptions=tuple(fv.corruptions),
                        split=fv.split, images=fv.images, severity=fv.severity,
                        batch_size=fv.batch_size, dataset=fv.dataset)
  artifact = checks.load_artifact(fv.artifact)
  if artifact.manifest is None:
    raise ValueError(f"--artifact={fv.artifact}: no manifest beside it (convert writes"
                     " one); selection needs the site names")
  if not artifact.manifest.sites:
    raise ValueError(f"--artifact={fv.artifact} has no FORGE sites to select from")
  try:
    config.check_sites([s.name for s in artifact.manifest.sites])
  except ValueError as e:
    raise ValueError(f"--k: {e}") from None
  if fv.data_dir and not os.path.exists(fv.data_dir):
    raise ValueError(f"--data_dir {fv.data_dir!r} does not exist")
  checks.check_output_dir(os.path.dirname(os.path.abspath(fv.output)), "--output")
  executor = executor_from_flags(fv)
  if config.sees_evaluation:
    logging.warning("ranking on evaluation corruptions of the test split: this is the"
                    " oracle ranking, not a design-time selection")
  selection = select(fv.artifact, fv.data_dir, config, executor=executor)
  write_sites_file(fv.output, selection, fv.artifact, command)
  print(ranking_table(selection))
  print(f"wrote {fv.output}: {', '.join(selection.sites)}")
  return 0
