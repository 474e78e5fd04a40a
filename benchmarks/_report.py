"""Shared by the benchmark scripts: print a report and, with --output, commit it."""

from __future__ import annotations

import os


def emit(report: str, output: str | None) -> None:
  print(report, end="")
  if output:
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, "w") as f:
      f.write(report)
