"""Sweep executors: speedup of local worker processes over in-process, in one run.

The full single-ordering pass of `forge_tflm eval` (the 15 corruptions x the whole
test split, methods source and forge, batch 64, optimized kernels, corruptions
cached beforehand) is timed with the inline executor and with the processes
executor (one worker per core), alternately `--repeats` times so that load on the
shared machine hits both alike; prints both times and their ratio, and checks that
the two gave identical results.

    python benchmarks/bench_sweep.py --artifact=runs/r20_forge.tflite \\
        --data_dir=../shared/datasets/cifar10 --output=benchmarks/results/sweep.txt
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import emit  # noqa: E402


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--artifact", required=True)
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--limit", type=int, default=0, help="images per stream (0: all)")
  ap.add_argument("--repeats", type=int, default=1)
  ap.add_argument("--workers", type=int, default=0, help="0: all cores")
  ap.add_argument("--output", default=None)
  args = ap.parse_args(argv)
  from forge_tflm.corruptions import CORRUPTIONS
  from forge_tflm.data import load_dataset
  from forge_tflm.evaluation.protocol import EvalConfig
  from forge_tflm.evaluation.run import run_evaluation
  from forge_tflm.evaluation.streams import generated_streams
  from forge_tflm.sweep import default_workers, make_executor

  clean = load_dataset("cifar10", "test", args.data_dir).random_subset(args.limit or None, 0)
  streams = list(generated_streams(clean, CORRUPTIONS, 5))  # generated/cached here
  config = EvalConfig(methods=("source", "forge"))
  workers = args.workers or default_workers()
  times = {"inline": [], "processes": []}
  results = {}
  for _ in range(args.repeats):
    for kind in times:
      t0 = time.perf_counter()
      doc = run_evaluation(config, streams, artifact_path=args.artifact, keras_path=None,
                           output_dir=None, command="bench_sweep", data_description="",
                           show_progress=False,
                           executor=make_executor(kind, workers))
      times[kind].append(time.perf_counter() - t0)
      results.setdefault(kind, doc["results"])
  same = results["inline"] == results["processes"]
  inline, procs = min(times["inline"]), min(times["processes"])
  n = sum(len(s.labels) for s in streams)
  lines = [
      f"# {datetime.date.today()}: python benchmarks/bench_sweep.py "
      f"{' '.join(argv if argv is not None else sys.argv[1:])}",
      f"# full pass: {len(streams)} corruptions x {len(clean.labels)} images = {n} images"
      f" per method, methods source+forge, batch 64, one ordering, optimized kernels;"
      f" best of {args.repeats}; {os.cpu_count()} cores visible, {workers} workers",
      f"inline:     {inline:.1f} s",
      f"processes:  {procs:.1f} s",
      f"speedup processes / inline: {inline / procs:.2f}x",
      f"identical results: {same}",
  ]
  emit("\n".join(lines) + "\n", args.output)
  return 0 if same else 1


if __name__ == "__main__":
  sys.exit(main())
