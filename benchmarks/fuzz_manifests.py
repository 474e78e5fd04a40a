"""Long mutation fuzz of manifests through the loading path (issue 34).

The CI test (tests/runtime/test_fuzz_manifests.py) runs mutants 0-9,999; this runs
--mutants (default 100,000) of the same generator (tests/runtime/manifest_fuzz.py:
three seed artifacts, plain and class-balanced; type swaps, deletions, non-finite
and huge numbers, deep nesting, site duplication / reordering, edits of every field
the model states, damaged text) and prints the counts measured. A traceback, crash,
hang or accepted contradiction is listed with its mutant (kept under --workdir) and
makes the exit status 1.

  python benchmarks/fuzz_manifests.py --output=benchmarks/results/fuzz_manifests.txt
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from tests.runtime import manifest_fuzz as mf  # noqa: E402


def _table(title: str, rows: dict) -> list[str]:
  lines = [f"{title:<12}" + "".join(f"{o:>14}" for o in mf.OUTCOMES) + f"{'total':>10}"]
  for name, counts in sorted(rows.items()):
    lines.append(f"{name:<12}" + "".join(f"{counts.get(o, 0):>14,}" for o in mf.OUTCOMES)
                 + f"{sum(counts.values()):>10,}")
  return lines


def report(summary: dict, command: str) -> str:
  counts, n = summary["counts"], summary["mutants"]
  lines = [
      f"# {datetime.date.today().isoformat()}: {command}",
      f"# tests/runtime/manifest_fuzz.py, run seed {summary['run_seed']}, mutants"
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
      *_table("seed", summary["by_seed"]),
      "",
      *_table("mutator", summary["by_mutator"]),
  ]
  if summary["findings"]:
    lines += ["", "findings:"] + [
        f"  #{r['index']} {r['seed']}/{r['mutator']}: {r['desc']} -> {r['outcome']}:"
        f" {r['message'][:200]} ({r.get('file', '')})" for r in summary["findings"]]
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--mutants", type=int, default=100_000)
  p.add_argument("--workers", type=int, default=2)
  p.add_argument("--run_seed", type=int, default=0)
  p.add_argument("--start", type=int, default=0)
  p.add_argument("--workdir", default=None, help="mutant files and findings")
  p.add_argument("--output", default=None, help="also write the report here")
  args = p.parse_args(argv)
  summary = mf.fuzz(args.mutants, args.workers, args.run_seed, args.start, args.workdir,
                    progress=lambda done, counts: print(
                        f"{done:,} {dict(counts)}", file=sys.stderr, flush=True))
  command = "python benchmarks/fuzz_manifests.py " + " ".join(
      argv if argv is not None else sys.argv[1:])
  text = report(summary, command.strip())
  sys.stdout.write(text)
  if args.output:
    with open(args.output, "w") as f:
      f.write(text)
  bad = any(summary["counts"].get(o) for o in mf.FAILURES)
  return 1 if bad or any(summary["worker_exit_codes"]) else 0


if __name__ == "__main__":
  sys.exit(main())
