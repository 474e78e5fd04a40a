"""Long mutation fuzz of `convert`'s int8 door (issue 53).

The CI test (tests/converter/test_fuzz_convert.py) runs mutants 0-1,999; this runs
--mutants (50,000 committed) of the same generator (forge_tflm/testing/convert_fuzz.py:
the plain int8 ResNet-20 and MLPerf Tiny's int8 ResNet-8 as seeds, artifact_fuzz's
flatbuffer-field, word, bit, byte and truncation mutators, each mutant converted in
its own forked child of a fork server) and prints the counts measured. A crash, hang,
traceback, multi-line message, partial output set or an artifact the evaluator refuses
is listed with its mutant (kept under --workdir) and makes the exit status 1.

  python benchmarks/fuzz_convert.py --mutants=50000 --output=benchmarks/results/fuzz_convert.txt
"""

from __future__ import annotations

import os
import platform
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import dated, fuzz_summary_lines, worker_fuzz_main  # noqa: E402
from forge_tflm.testing import artifact_fuzz as af  # noqa: E402
from forge_tflm.testing import convert_fuzz as cf  # noqa: E402


def report(summary: dict, command: str) -> str:
  n = summary["mutants"]
  lines = [
      dated(command),
      f"# forge_tflm/testing/convert_fuzz.py, run seed {summary['run_seed']}, mutants"
      f" {summary['start']}-{summary['start'] + n - 1}, {summary['workers']} fork-server"
      f" workers, one forked child per mutant (alarm {af.TIME_LIMIT_S} s, +"
      f"{af.MEMORY_LIMIT_BYTES >> 30} GiB address space), {cf.CALIBRATION_IMAGES}"
      f" calibration images; seeds (sha256) {summary['seeds']}; {platform.platform()},"
      f" Python {platform.python_version()}, {os.cpu_count()} CPUs",
      "",
      *fuzz_summary_lines(summary, cf.OUTCOMES, af.TIME_LIMIT_S,
                         "other exception, multi-line message, partial output, an artifact"
      " the evaluator refuses"),
  ]
  if summary["findings"]:
    lines += ["", "findings:"] + [
        f"  #{r['index']} {r['seed']}/{r['mutator']}: {r['desc'][:200]} ->"
        f" {r['outcome']}: {r['message'][:200]} ({r.get('file', '')})"
        for r in summary["findings"]]
  others = [r for r in summary["rejected_not_by_validator"]
            if not r["message"].startswith("[converter]")]
  if others:
    lines += ["", "rejected neither by the model check nor by the converter (first 100):"] + [
        f"  #{r['index']} {r['seed']}/{r['mutator']}: {r['desc'][:200]} -> {r['message'][:200]}"
        for r in others]
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  return worker_fuzz_main(cf, "fuzz_convert.py", report, __doc__, argv)


if __name__ == "__main__":
  sys.exit(main())
