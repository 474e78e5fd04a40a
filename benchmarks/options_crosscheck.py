"""Host = device for FORGE_RECALIB options, over --buffers generated option buffers.

The CI test (tests/custom_ops/test_fuzz_options.py) cross-checks 50,000; this runs
--buffers (default 1,000,000) of the same generator (tests/custom_ops/
options_crosscheck.py: structured maps over every option field and byte mutants of
valid maps) through the fuzz harness's driver build (the C++ parser, then every C
path that consumes the options, under ASan/UBSan) and ops.decode_options, and
writes the counts. Any disagreement is listed and makes the exit status 1.

  python benchmarks/options_crosscheck.py --output=benchmarks/results/options_crosscheck.txt
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import command_line, dated, emit  # noqa: E402
from forge_tflm.testing import options_crosscheck as oc  # noqa: E402


def _commit() -> str:
  r = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "--short", "HEAD"],
                     capture_output=True, text=True)
  return r.stdout.strip() or "unknown"


def report(result: oc.Result, args, command: str, inc: str, wall: float) -> str:
  lines = [
      f"{dated(command)} (commit {_commit()})",
      f"# generator seed {args.seed}; C++ parser with flatbuffers "
      f"{oc.flatbuffers_version(inc)} ({inc}); harness driver build, g++ ASan+UBSan, "
      f"FORGE_RECALIB_X86; {platform.platform()}, Python {platform.python_version()}",
      "",
      f"buffers: {result.buffers:,}",
      f"accepted by both (every field's value equal): {result.both_ok:,}",
      f"refused by both: {result.both_err:,}",
      f"disagreements: {len(result.disagreements):,}",
      f"harness: {result.harness_summary} (last chunk of "
      f"{min(args.chunk, result.buffers):,})",
      "C paths run on each parsed input: forge_recalib_s8_ansi, "
      "the x86 hooks at each instruction-set cap (bit-exact to ansi)",
      f"wall: {wall:.0f} s",
  ]
  for hexdata, cpp, py in result.disagreements[:50]:
    lines.append(f"DISAGREE {hexdata}: C++ {cpp!r}, Python {py!r}")
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--buffers", type=int, default=1_000_000)
  parser.add_argument("--seed", type=int, default=1)
  parser.add_argument("--chunk", type=int, default=100_000)
  parser.add_argument("--output", default=None)
  args = parser.parse_args(argv)
  inc = oc.flatbuffers_include()
  if inc is None or not oc.compilers_available():
    print("needs gcc/g++ and flatbuffers/flexbuffers.h", file=sys.stderr)
    return 2
  command = command_line("options_crosscheck.py", argv)
  with tempfile.TemporaryDirectory() as tmp:
    binary, err = oc.build_driver(inc, tmp)
    if binary is None:
      print(err, file=sys.stderr)
      return 2
    t0 = time.time()
    result = oc.crosscheck(binary, args.buffers, args.seed, tmp, args.chunk)
    text = report(result, args, command, inc, time.time() - t0)
  emit(text, args.output)
  return 1 if result.disagreements else 0


if __name__ == "__main__":
  sys.exit(main())
