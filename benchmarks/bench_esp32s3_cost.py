"""Instructions per inference and FORGE's share on the emulated ESP32-S3.

Builds esp32s3_app/esp32s3 (TFLM + ESP-NN's _esp32s3 kernels + FORGE, built and run by
forge_tflm.deploy.targets as tests/deploy/test_esp32s3_qemu.py does) with FORGE's ansi
core and with its S3 variant (forge_recalib_s8_esp32s3), runs the bundled ResNet-20
plain int8 and with FORGE at 21 sites on the first --images gaussian_noise-5 CIFAR-10
test images at batch 1 with FORGE adapting, under `qemu-system-xtensa -machine esp32s3
-icount shift=0` with trace=none and the second core parked
(esp32s3_app/esp32s3/cpu1_park.S), and prints the tables of bench_mcu_cost.py (the
Cortex-M boards; results/mcu_cost.txt is that script's alone), FORGE per site with both
cores side by side.

Instruction counts: with -icount shift=0 each instruction is 1 ns of virtual time and
CCOUNT runs at 40 MHz: the target calibrates exactly 25 instructions per tick at boot.
Emulated instructions are not cycles or energy: the S3's PIE and FPU instructions,
loads from flash through the cache and ESP-NN's assembly all count 1 here. The
paper's 7.7% is adapting's cost over plain inference, timed on a real ESP32-S3.

    python benchmarks/bench_esp32s3_cost.py --output=benchmarks/results/esp32s3_cost.txt
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks.bench_mcu_cost import forge_site_shapes, site_table  # noqa: E402
from benchmarks._report import command_line, dated, emit  # noqa: E402

from forge_tflm.deploy import firmware, targets  # noqa: E402

RUNS = (("plain", "ansi"), ("forge_all", "ansi"), ("forge_all", "esp32s3"))
LABELS = {("plain", "ansi"): "plain int8", ("forge_all", "ansi"): "FORGE, 21 sites, ansi",
          ("forge_all", "esp32s3"): "FORGE, 21 sites, S3 variant"}
# ../shared/paper, energy table: inference 286.1 ms, inference + adapt 308.0 ms on an
# ESP32-S3 board (ESP-NN SIMD kernels): +21.9 ms, 7.7% of the inference time.
PAPER = "+7.7% (21.9 ms on 286.1 ms of inference)"


def run_all(artifacts, stream, images: int):
  """(artifact, variant) -> parsed trace=none run; and the calibration line."""
  from forge_tflm import deploy

  runs, calib = {}, None
  for name, variant in RUNS:
    x = deploy.model_input(artifacts[name], stream.images[:images])
    elf = targets.build_esp32s3_elf(targets.gen_dir_for(artifacts[name], x, name),
                                    variant=variant)
    text, calib = targets.run_esp32s3(elf, "--trace=none", icount=True)
    run = deploy.parse_app_output(text)
    if not run.ok or len(run.ticks) != images:
      raise RuntimeError(f"esp32s3/{name}/{variant} failed:\n{text[-2000:]}")
    runs[(name, variant)] = run
  return runs, calib


def totals_table(runs) -> list[str]:
  """Per run: instructions, FORGE's share, vs plain, arena; then per op type."""
  lines = ["| artifact | instructions/inference | FORGE instructions | FORGE share | "
           "vs plain | arena_used | FORGE persistent |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
  plain_total = float(np.mean(runs[("plain", "ansi")].ticks))
  for key, run in runs.items():
    total = float(np.mean(run.ticks))
    forge = run.cost_type.get("FORGE_RECALIB", {"ticks": 0})["ticks"] / len(run.ticks)
    lines.append(f"| {LABELS[key]} | {total:,.0f} | {forge:,.0f} | "
                 f"{100 * forge / total:.2f}% | {100 * (total / plain_total - 1):+.1f}% | "
                 f"{run.mem['arena_used']:,} B | {run.mem['forge_persistent']:,} B |")
  types = list(runs[("forge_all", "ansi")].cost_type)
  lines += ["", "instructions/inference per operator type:", "",
            "| artifact | " + " | ".join(types) + " |", "| --- |" + " ---: |" * len(types)]
  for key, run in runs.items():
    n = len(run.ticks)
    lines.append(f"| {LABELS[key]} | " + " | ".join(
        f"{run.cost_type[t]['ticks'] / n:,.0f}" if t in run.cost_type else "-"
        for t in types) + " |")
  return lines


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--images", type=int, default=4, help="images per run (the mean is "
                  "reported; counts repeat to <0.01%% image to image)")
  ap.add_argument("--output", default=None, help="also write the report here")
  args = ap.parse_args(argv)

  why = firmware.missing_tools("esp32s3")
  if why:
    print(f"cannot run: {why}")
    return 2
  from forge_tflm import deploy

  t0 = time.time()
  targets.make_esp32s3(["lib"])
  t_build = time.time() - t0
  artifacts = targets.artifact_paths()
  stream = deploy.corrupted_stream(targets.DATA_DIR, "gaussian_noise", 5,
                                   limit=targets.STREAM_LIMIT)
  runs, calib = run_all(artifacts, stream, args.images)
  lines = header_lines(argv, args.images)
  lines += ["", f"## esp32s3: qemu-system-xtensa -machine esp32s3, Xtensa LX7 (CCOUNT "
            f"calibration: {int(calib['calib_instructions']):,} loop instructions = "
            f"{int(calib['calib_ticks']):,} ticks, "
            f"{int(calib['instructions_per_tick_x1000']) / 1000:g} instructions/tick)", ""]
  lines += totals_table(runs)
  columns = [(k, LABELS[k].split(", ")[-1]) for k in RUNS if k[0] == "forge_all"]
  lines += site_table(runs, forge_site_shapes(artifacts["forge_all"]), columns,
                      "FORGE_RECALIB per site (21 sites), by resolution:")
  lines += ["", f"Paper (../shared/paper, energy table): adapting costs {PAPER}, measured "
            "on an ESP32-S3 board; the comparable figure above is the 'vs plain' column. "
            "These are emulated instructions, not cycles or energy: every instruction "
            "counts 1 (PIE, FPU, flash loads through the cache alike).",
            "", f"# build (warm unless the cache was empty) {t_build:.0f} s, "
            f"total {time.time() - t0:.0f} s"]
  emit("\n".join(lines) + "\n", args.output)
  return 0


def header_lines(argv, images: int) -> list[str]:
  """Provenance: date, command, commit (+ a dirty tree's mark), setup."""
  import subprocess

  def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT).stdout.strip()

  dirty = git("status", "--porcelain", "--untracked-files=no")
  return [dated(command_line("bench_esp32s3_cost.py", argv)),
          f"# commit {git('rev-parse', '--short', 'HEAD') or 'unknown'}"
          f"{' + uncommitted changes' if dirty else ''}",
          f"# bundled ResNet-20 (models/resnet20_cifar10.keras), first {images} "
          "gaussian_noise-5 CIFAR-10 test images, batch 1, FORGE adapting, trace=none; "
          "esp-tflite-micro 99f49e1 + ESP-NN d45b843 _esp32s3 kernels, "
          "xtensa-esp32s3-elf-gcc 12.2 -O2, qemu-system-xtensa -icount shift=0 "
          "(instructions)"]


if __name__ == "__main__":
  sys.exit(main())
