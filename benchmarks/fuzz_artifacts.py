"""Long mutation fuzz of artifacts through the evaluator's loading path (issue 20).

The CI test (tests/runtime/test_fuzz_artifacts.py) runs mutants 0-9,999; this runs
--mutants (default 100,000) of the same generator (forge_tflm/testing/artifact_fuzz.py:
two seed artifacts, byte/bit/word/truncation and structured mutations, each mutant in
its own forked child of a fork server: Artifact.load, SegmentedModel.from_artifact,
one inference) and prints the counts measured. A crash, hang or unclean error is
listed with its mutant (kept under --workdir) and makes the exit status 1.

  python benchmarks/fuzz_artifacts.py --output=benchmarks/results/fuzz_artifacts.txt
"""

from __future__ import annotations

import os
import platform
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import dated, fuzz_summary_lines, worker_fuzz_main  # noqa: E402
from forge_tflm.testing import artifact_fuzz as af  # noqa: E402


def report(summary: dict, command: str) -> str:
  n = summary["mutants"]
  lines = [
      dated(command),
      f"# forge_tflm/testing/artifact_fuzz.py, run seed {summary['run_seed']}, mutants"
      f" {summary['start']}-{summary['start'] + n - 1}, {summary['workers']} fork-server"
      f" workers, one forked child per mutant (alarm {af.TIME_LIMIT_S} s, +"
      f"{af.MEMORY_LIMIT_BYTES >> 30} GiB address space); {platform.platform()},"
      f" Python {platform.python_version()}, {os.cpu_count()} CPUs",
      "",
      *fuzz_summary_lines(summary, af.OUTCOMES, af.TIME_LIMIT_S,
                         "other exception or multi-line message"),
  ]
  if summary["findings"]:
    lines += ["", "findings:"] + [
        f"  #{r['index']} {r['seed']}/{r['mutator']} ({r['kernels']}): {r['desc']} ->"
        f" {r['outcome']}: {r['message'][:200]} ({r.get('file', '')})"
        for r in summary["findings"]]
  if summary["rejected_not_by_validator"]:
    lines += ["", "rejected by LiteRT after validation (first 100):"] + [
        f"  #{r['index']} {r['seed']}/{r['mutator']}: {r['desc']} -> {r['message'][:200]}"
        for r in summary["rejected_not_by_validator"]]
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  return worker_fuzz_main(af, "fuzz_artifacts.py", report, __doc__, argv)


if __name__ == "__main__":
  sys.exit(main())
