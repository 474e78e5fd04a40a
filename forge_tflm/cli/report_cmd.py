"""Gather every experiment's results into <results_dir>/REPORT.md, each figure next
to the paper's, differences over 2 points explained (or marked unexplained)."""

from __future__ import annotations

import os

from absl import flags


def define_flags(fv: flags.FlagValues) -> flags.FlagValues:
  flags.DEFINE_string("results_dir", "results", "Where `forge_tflm experiment` wrote"
                      " NAME/result.json.", flag_values=fv)
  return fv


def run(fv: flags.FlagValues, command: str) -> int:
  from forge_tflm.experiments.report import write_report

  if not os.path.isdir(fv.results_dir):
    raise ValueError(f"--results_dir {fv.results_dir!r} is not a directory (run"
                     " forge_tflm experiment NAME first)")
  print(f"wrote {write_report(fv.results_dir)}")
  return 0
