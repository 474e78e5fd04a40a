"""Long mutation fuzz of convert's sites files and eval's resume files (issue 53).

The CI tests (tests/converter/test_fuzz_sites.py, tests/evaluation/test_fuzz_resume.py)
run mutants 0-1,999 of each; this runs --mutants of each from the same generators
(forge_tflm/testing/sites_fuzz.py, forge_tflm/testing/resume_fuzz.py: genuine files
mutated as JSON documents and as text, deep and huge ones included, each through the
code the CLI runs on it, timed in CPU seconds) and prints the counts measured. A
traceback, an unclean message, a hang or an accepted file that contradicts its run
or model is listed with its mutant and makes the exit status 1.

  python benchmarks/fuzz_sites_resume.py --mutants=20000 --output=benchmarks/results/fuzz_sites_resume.txt
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import command_line, dated, emit, in_process_section  # noqa: E402
from forge_tflm.testing import resume_fuzz as rf  # noqa: E402
from forge_tflm.testing import sites_fuzz as sf  # noqa: E402


def report(sites: dict, resume: dict, command: str) -> str:
  lines = [dated(command),
           f"# forge_tflm/testing/sites_fuzz.py and forge_tflm/testing/resume_fuzz.py, run seed "
           f"{sites['run_seed']}, mutants {sites['start']}-{sites['start'] + sites['mutants'] - 1}"
           f" of each, in one process; {platform.platform()}, Python"
           f" {platform.python_version()}, {os.cpu_count()} CPUs", ""]
  for what, s, outcomes, limit in (
      ("sites files (convert --sites=@FILE)", sites, sf.OUTCOMES, sf.TIME_LIMIT_S),
      ("resume files (eval --resume: one stream's record)", resume, rf.OUTCOMES,
       rf.TIME_LIMIT_S)):
    lines += in_process_section(
        what, s, outcomes, f"failures (traceback, unclean message, hang past {limit} CPU s)",
        "accepted files contradicting their run or model") + [""]
  return "\n".join(lines).rstrip("\n") + "\n"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--mutants", type=int, default=20_000)
  p.add_argument("--run_seed", type=int, default=0)
  p.add_argument("--start", type=int, default=0)
  p.add_argument("--output", default=None, help="also write the report here")
  args = p.parse_args(argv)
  progress = lambda what: lambda done, counts: print(f"{what} {done:,} {dict(counts)}",
                                                     file=sys.stderr, flush=True)
  sites = sf.fuzz(args.mutants, args.run_seed, args.start, progress("sites"))
  with tempfile.TemporaryDirectory(prefix="forge_resume_fuzz_") as d:
    resume = rf.fuzz(args.mutants, args.run_seed, args.start, progress("resume"), workdir=d)
  emit(report(sites, resume, command_line("fuzz_sites_resume.py", argv)), args.output)
  return 1 if sites["findings"] or resume["findings"] else 0


if __name__ == "__main__":
  sys.exit(main())
