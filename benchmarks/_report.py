"""Shared by the benchmark scripts: print a report and, with --output, commit it; the
long fuzz and cross-check runs' command line, outcome tables and driver."""

from __future__ import annotations

import argparse
import datetime
import os
import sys


def emit(report: str, output: str | None) -> None:
  print(report, end="")
  if output:
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, "w") as f:
      f.write(report)


def command_line(script: str, argv) -> str:
  """The command as the report's first line records it."""
  args = argv if argv is not None else sys.argv[1:]
  return f"python benchmarks/{script} " + " ".join(args)


def dated(command: str) -> str:
  return f"# {datetime.date.today().isoformat()}: {command.strip()}"


def run_head(script: str, seconds: float, argv=None) -> list[str]:
  """A result file's first lines: the dated command and the run's total time."""
  return [dated(command_line(script, argv)), f"# total {seconds:.0f} s", ""]


def outcome_table(title: str, rows: dict, outcomes) -> list[str]:
  """One row per seed or mutator: its count of each outcome and the total."""
  lines = [f"{title:<12}" + "".join(f"{o:>14}" for o in outcomes) + f"{'total':>10}"]
  for name, counts in sorted(rows.items()):
    lines.append(f"{name:<12}" + "".join(f"{counts.get(o, 0):>14,}" for o in outcomes)
                 + f"{sum(counts.values()):>10,}")
  return lines


def worker_fuzz_main(fuzzer, script: str, report, doc: str, argv=None) -> int:
  """main() of a fuzz run over a worker pool (tests/runtime's artifact and manifest
  fuzzers share `fuzz(mutants, workers, run_seed, start, workdir, progress)`)."""
  p = argparse.ArgumentParser(description=doc.split("\n")[0])
  p.add_argument("--mutants", type=int, default=100_000)
  p.add_argument("--workers", type=int, default=2)
  p.add_argument("--run_seed", type=int, default=0)
  p.add_argument("--start", type=int, default=0)
  p.add_argument("--workdir", default=None, help="mutant files and findings")
  p.add_argument("--output", default=None, help="also write the report here")
  args = p.parse_args(argv)
  summary = fuzzer.fuzz(args.mutants, args.workers, args.run_seed, args.start,
                        args.workdir, progress=lambda done, counts: print(
                            f"{done:,} {dict(counts)}", file=sys.stderr, flush=True))
  emit(report(summary, command_line(script, argv)), args.output)
  bad = any(summary["counts"].get(o) for o in fuzzer.FAILURES)
  return 1 if bad or any(summary["worker_exit_codes"]) else 0


def fuzz_summary_lines(summary: dict, outcomes, time_limit: int, unclean: str) -> list[str]:
  """A fuzz run's counts: outcomes, crashes, hangs, unclean errors (`unclean` says what
  counts), rejections by origin, time, and the tables by seed and by mutator."""
  counts = summary["counts"]
  n = summary["mutants"]
  return [
      f"mutants: {n:,}",
      "outcomes: " + ", ".join(f"{o} {counts.get(o, 0):,}" for o in outcomes),
      f"crashes (abort, segfault, any signal): {counts.get('crash', 0)}",
      f"hangs (past {time_limit} s): {counts.get('hang', 0)}",
      f"unclean errors ({unclean}): {counts.get('error', 0)}",
      "rejections by: " + ", ".join(f"{k} {v:,}" for k, v in
                                    sorted(summary["rejected_by"].items())),
      f"wall: {summary['wall_seconds']:,.0f} s, CPU (workers and children):"
      f" {summary['cpu_seconds']:,.0f} s = {1000 * summary['cpu_seconds'] / max(n, 1):.1f}"
      f" ms per mutant; slowest mutant {summary['max_mutant_seconds']:.2f} s, mean"
      f" {1000 * summary['mean_mutant_seconds']:.1f} ms (wall, shared host)",
      "",
      *outcome_table("seed", summary["by_seed"], outcomes),
      "",
      *outcome_table("mutator", summary["by_mutator"], outcomes),
  ]


def in_process_section(what: str, s: dict, outcomes, failures: str,
                       contradictions: str) -> list[str]:
  """One in-process fuzz run (forge_tflm.testing.artifact_fuzz.in_process's summary) as a
  report section: time, outcomes, the failure and contradiction counts (`failures`
  and `contradictions` say what they count), the tables, the most frequent refusal
  reasons and the findings."""
  counts, n = s["counts"], s["mutants"]
  lines = [f"## {what}: {n:,} mutants, {s['wall_seconds']:,.0f} s wall, CPU"
           f" {s['cpu_seconds']:,.0f} s ({1000 * s['cpu_seconds'] / max(n, 1):.2f} ms per"
           f" mutant); slowest mutant {s['slowest_cpu_seconds']:.3f} CPU s"
           f" (#{s['slowest_index']})",
           "outcomes: " + ", ".join(f"{o} {counts.get(o, 0):,}" for o in outcomes),
           f"{failures}: {counts.get('error', 0) + counts.get('hang', 0)}",
           f"{contradictions}: {counts.get('contradiction', 0)}", "",
           *outcome_table("seed", s["by_seed"], outcomes), "",
           *outcome_table("mutator", s["by_mutator"], outcomes), "",
           "most frequent reasons (numbers and quoted values left out):"]
  lines += [f"  {v:>7,}  {k}" for k, v in s["reasons"].items()]
  if s["findings"]:
    lines += ["", "findings:"] + [
        f"  #{r['index']} {r['seed']}/{r['mutator']}: {r['desc'][:200]} -> {r['outcome']}:"
        f" {r['message'][:300]}" for r in s["findings"][:50]]
  return lines
