"""Long mutation fuzz of verify-device's inputs: device logs and PPK2 captures (issue 34).

The CI test (tests/deploy/test_fuzz_deploy_inputs.py) runs mutants 0-9,999 of each;
this runs --mutants (default 100,000) of each from the same generator
(forge_tflm/testing/deploy_fuzz.py: two genuine logs, two PPK2 exports; value, token, line,
byte and truncation mutations; each mutant through verify-device's own parsing and
verdict code) and prints the counts measured. A traceback, an unclean message or a
verdict that contradicts its input is listed with its mutant and makes the exit
status 1.

  nice python benchmarks/fuzz_deploy_inputs.py --output=benchmarks/results/fuzz_deploy_inputs.txt
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import command_line, dated, emit, in_process_section  # noqa: E402
from forge_tflm.testing import deploy_fuzz as df  # noqa: E402


def report(summary: dict, command: str) -> str:
  n = summary["mutants"]
  lines = [dated(command),
           f"# forge_tflm/testing/deploy_fuzz.py, run seed {summary['run_seed']}, mutants "
           f"{summary['start']}-{summary['start'] + n - 1} of each kind, in one process; "
           f"{platform.platform()}, Python {platform.python_version()}, "
           f"{os.cpu_count()} CPUs; CPU {summary['cpu_seconds']:,.0f} s", ""]
  failures = "failures (traceback or unclean message)"
  lines += in_process_section("device logs (verify-device)", summary["log"],
                              df.LOG_OUTCOMES, failures,
                              "verdicts contradicting their input")
  lines += [""] + in_process_section("PPK2 captures (verify-device --ppk2)",
                                     summary["csv"], df.CSV_OUTCOMES, failures,
                                     "verdicts contradicting their input")
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--mutants", type=int, default=100_000)
  p.add_argument("--run_seed", type=int, default=0)
  p.add_argument("--start", type=int, default=0)
  p.add_argument("--output", default=None, help="also write the report here")
  args = p.parse_args(argv)
  summary = df.fuzz(args.mutants, args.run_seed, args.start,
                    progress=lambda what, done, counts: print(
                        f"{what} {done:,} {dict(counts)}", file=sys.stderr, flush=True))
  emit(report(summary, command_line("fuzz_deploy_inputs.py", argv)), args.output)
  return 1 if summary["log"]["findings"] or summary["csv"]["findings"] else 0


if __name__ == "__main__":
  sys.exit(main())
