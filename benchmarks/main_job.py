"""The README's main job, timed as a new user meets it, and the eval's throughput.

Runs the `forge_tflm` commands of the README's set-up line (the one that installs and
runs the main job) exactly as written, in the repository root, with `runs/` redirected
to a scratch folder and an empty FORGE_TFLM_CACHE (a first run: datasets decoded and
corruptions generated as a fresh clone does). Then, in the same run, plain LiteRT on the
plain int8 model (the convert command's --plain_output) over as many images, batch 64,
one thread (the evaluator's thread count): the eval's images per second as a ratio of
plain LiteRT's on the same machine. Writes the eval's printed table verbatim, which
tests/test_main_job.py compares with the README and with a reduced run of the same
command.

    python benchmarks/main_job.py --output=benchmarks/results/main_job.md

Run it on a quiet machine: the report records the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import command_line, dated, emit  # noqa: E402


def readme_main_job(readme: str | None = None) -> list[list[str]]:
  """argv of each `forge_tflm` command in the README's install-and-run line."""
  if readme is None:
    with open(os.path.join(REPO_ROOT, "README.md")) as f:
      readme = f.read()
  blocks = re.findall(r"```sh\n(.*?)\n```", readme, re.S)
  line = next(b for b in blocks if "forge_tflm convert" in b and "pip install" in b)
  return [shlex.split(part) for part in line.split("&&") if part.strip().startswith("forge_tflm")]


def flag(argv: list[str], name: str) -> str | None:
  for a in argv:
    if a.startswith(f"--{name}="):
      return a.split("=", 1)[1]
  return None


def in_scratch(path: str, runs: str) -> str:
  return os.path.join(runs, path[len("runs/"):]) if path.startswith("runs/") else path


def redirect(argv: list[str], runs: str) -> list[str]:
  return [a.split("=", 1)[0] + "=" + in_scratch(a.split("=", 1)[1], runs) if "=" in a else a
          for a in argv]


def timed(argv: list[str], env: dict) -> tuple[float, str]:
  t0 = time.time()
  r = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
  if r.returncode != 0:
    raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
  return time.time() - t0, r.stdout


def plain_images_per_second(plain: str, data_dir: str, images: int, batch: int) -> float:
  import numpy as np

  from benchmarks.bench_eval_overhead import plain_runner, timed_pass
  from forge_tflm.artifact import InputContract
  from forge_tflm.data import load_dataset
  from forge_tflm.runtime.segmented import SegmentedModel

  with open(plain, "rb") as f:
    model = f.read()
  x = load_dataset("cifar10", "test", data_dir).random_subset(images, 0).images
  quantize = SegmentedModel(model, "optimized").quantize_input
  x = quantize(InputContract().to_float(x))
  run = plain_runner(model, "optimized", batch, 1)
  timed_pass(run, x[:batch], batch)  # Warm-up.
  return len(x) / min(timed_pass(run, x, batch) for _ in range(3))


def report(argv=None) -> str:
  jobs = readme_main_job()
  load_before = os.getloadavg()
  with tempfile.TemporaryDirectory() as scratch:
    env = dict(os.environ, FORGE_TFLM_CACHE=os.path.join(scratch, "cache"))
    runs = os.path.join(scratch, "runs")
    seconds, printed = {}, ""
    for job in jobs:
      name = job[1]
      seconds[name], out = timed(redirect(job, runs), env)
      printed = out if name == "eval" else printed
    convert, evaluate = (next(j for j in jobs if j[1] == n) for n in ("convert", "eval"))
    with open(os.path.join(in_scratch(flag(evaluate, "output_dir"), runs),
                           "results.json")) as f:
      doc = json.load(f)
    plain = in_scratch(flag(convert, "plain_output"), runs)
    per_method = sum(doc["streams"].values())
    method_images = per_method * len(doc["config"]["methods"])
    plain_ips = plain_images_per_second(plain, flag(evaluate, "data_dir"),
                                        min(per_method, 2000), 64)
  load_after = os.getloadavg()
  eval_ips = method_images / seconds["eval"]
  lines = [dated(command_line("main_job.py", argv)),
           f"# {os.cpu_count()} CPU cores; load average (1 min) {load_before[0]:.2f} before,"
           f" {load_after[0]:.2f} after; empty FORGE_TFLM_CACHE (first run)", "",
           "The README's main job, each command as written:", ""]
  lines += [f"    {shlex.join(j)}" for j in jobs]
  lines += ["", "| step | seconds |", "| --- | ---: |"]
  lines += [f"| {name} | {s:.0f} |" for name, s in seconds.items()]
  lines += [f"| **total** | {sum(seconds.values()):.0f} |", "",
            "| throughput | images per second |", "| --- | ---: |",
            f"| eval: {per_method:,} stream images x {len(doc['config']['methods'])}"
            f" methods / eval wall time | {eval_ips:.0f} |",
            f"| plain LiteRT, plain int8 model, batch 64, 1 thread | {plain_ips:.0f} |",
            f"| **ratio eval / plain** | {eval_ips / plain_ips:.2f} |", "",
            "What the eval printed:", "", printed.strip(), ""]
  return "\n".join(lines)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--output", default=None, help="also write the report here")
  args = p.parse_args(argv)
  emit(report(argv), args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
