"""Long mutation fuzz of manifests through the loading path (issue 34).

The CI test (tests/runtime/test_fuzz_manifests.py) runs mutants 0-9,999; this runs
--mutants (default 100,000) of the same generator (forge_tflm/testing/manifest_fuzz.py:
three seed artifacts, one and two FORGE sites; type swaps, deletions, non-finite
and huge numbers, deep nesting, site duplication / reordering, edits of every field
the model states, damaged text) and prints the counts measured. A traceback, crash,
hang or accepted contradiction is listed with its mutant (kept under --workdir) and
makes the exit status 1.

  python benchmarks/fuzz_manifests.py --output=benchmarks/results/fuzz_manifests.txt
"""

from __future__ import annotations

import os
import platform
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import dated, outcome_table, worker_fuzz_main  # noqa: E402
from forge_tflm.testing import manifest_fuzz as mf  # noqa: E402


def report(summary: dict, command: str) -> str:
  counts, n = summary["counts"], summary["mutants"]
  lines = [
      dated(command),
      f"# forge_tflm/testing/manifest_fuzz.py, run seed {summary['run_seed']}, mutants"
      f" {summary['start']}-{summary['start'] + n - 1}, {summary['workers']} workers"
      f" (alarm {mf.TIME_LIMIT_S} s per mutant; 1 in {mf.FULL_PATH_EVERY} also through"
      f" Artifact.load + SegmentedModel.from_artifact); {platform.platform()}, Python"
      f" {platform.python_version()}, {os.cpu_count()} CPUs (shared host)",
      "",
      f"mutants: {n:,}",
      "outcomes: " + ", ".join(f"{o} {counts.get(o, 0):,}" for o in mf.OUTCOMES),
      f"accepted contradictions of the model: {counts.get('contradiction', 0)}",
      f"tracebacks or unclean messages: {counts.get('error', 0)}",
      f"crashes: {counts.get('crash', 0)}, hangs: {counts.get('hang', 0)}",
      f"wall: {summary['wall_seconds']:,.0f} s; slowest mutant"
      f" {summary['max_mutant_seconds']:.2f} s, mean"
      f" {1000 * summary['mean_mutant_seconds']:.2f} ms",
      "",
      *outcome_table("seed", summary["by_seed"], mf.OUTCOMES),
      "",
      *outcome_table("mutator", summary["by_mutator"], mf.OUTCOMES),
  ]
  if summary["findings"]:
    lines += ["", "findings:"] + [
        f"  #{r['index']} {r['seed']}/{r['mutator']}: {r['desc']} -> {r['outcome']}:"
        f" {r['message'][:200]} ({r.get('file', '')})" for r in summary["findings"]]
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  return worker_fuzz_main(mf, "fuzz_manifests.py", report, __doc__, argv)


if __name__ == "__main__":
  sys.exit(main())
