"""Instructions per inference and FORGE's share on Cortex-M (qemu-system-arm).

Builds esp32s3_app/cortexm (TFLite-Micro + CMSIS-NN + FORGE, see
tests/deploy/test_cortexm.py) for the Cortex-M4F (mps2-an386, CMSIS-NN DSP path)
and the Cortex-M55 (mps3-an547, CMSIS-NN Helium/MVE path), runs the bundled ResNet-20
converted with FORGE at 21 sites, at 3 sites and without FORGE (plain int8) on the
first --images gaussian_noise-5 CIFAR-10 test images at batch 1 with FORGE adapting,
under `qemu-system-arm -icount shift=0` with trace=none, and prints:

  - per artifact: instructions per inference, FORGE's instructions and share,
    TFLM arena_used (32-bit target) and FORGE's persistent bytes;
  - per operator type: instructions per inference;
  - per FORGE site resolution: instructions per site call and per element (H*W*C).

Instruction counts: with -icount shift=0 each instruction is 1 ns of virtual time and
SysTick counts at the board's processor clock; the target calibrates instructions per
tick with a loop of known length at boot (40 on the an386, 31.25 on the an547) and the
app core's MicroProfiler reads that clock around every operator (resolution: one
SysTick tick; the clock read itself, ~30 instructions, is inside each op's count).

    python benchmarks/bench_mcu_cost.py --output=benchmarks/results/mcu_cost.txt
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import emit  # noqa: E402

from tests.deploy import test_cortexm as cm  # noqa: E402  (build/run helpers)

ARTIFACT_LABELS = {"forge_all": "FORGE, 21 sites", "forge_3": "FORGE, 3 sites",
                   "plain": "plain int8"}


def forge_site_shapes(path: str) -> dict[int, tuple[int, ...]]:
  """FORGE op index -> its input shape (N, H, W, C)."""
  from forge_tflm import tflite_graph as tg

  with open(path, "rb") as f:
    model = tg.load_model(f.read())
  sg = model.subgraphs[0]
  return {k: tuple(int(d) for d in sg.tensors[op.inputs[0]].shape)
          for k, op in enumerate(sg.operators) if tg.op_name(model, op) == tg.FORGE_RECALIB}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--images", type=int, default=4, help="images per run (costs are "
                  "data-independent to <0.01%%; the mean is reported)")
  ap.add_argument("--boards", default="an386,an547")
  ap.add_argument("--output", default=None, help="also write the report here")
  args = ap.parse_args(argv)

  why = cm.missing_tools()
  if why:
    print(f"cannot run: {why}")
    return 2
  from forge_tflm import deploy

  t0 = time.time()
  boards = [b for b in args.boards.split(",") if b]
  for board in boards:
    cm.make(board, ["lib"])
  t_build = time.time() - t0
  artifacts = cm.artifact_paths()
  stream = deploy.corrupted_stream(cm.DATA_DIR, "gaussian_noise", 5, limit=cm.STREAM_LIMIT)
  shapes = forge_site_shapes(artifacts["forge_all"])

  lines = [f"# {datetime.date.today()}: python benchmarks/bench_mcu_cost.py "
           f"{' '.join(argv if argv is not None else sys.argv[1:])}",
           f"# bundled ResNet-20 (models/resnet20_cifar10.keras), first {args.images} "
           f"gaussian_noise-5 CIFAR-10 test images, batch 1, FORGE adapting, trace=none; "
           f"TFLM 90b983c + CMSIS-NN 4ab83cc kernels, arm-none-eabi-gcc -O2, "
           f"qemu-system-arm -icount shift=0 (instructions)"]
  for board in boards:
    machine, cpu, _ = cm.BOARDS[board]
    runs, calib = {}, None
    for name in ("forge_all", "forge_3", "plain"):
      x = deploy.model_input(artifacts[name], stream.images[:args.images])
      elf = cm.build_elf(board, cm.gen_dir_for(artifacts[name], x, name))
      text, calib = cm.run_qemu(board, elf, "--trace=none")
      run = deploy.parse_app_output(text)
      if not run.ok or len(run.ticks) != args.images:
        raise RuntimeError(f"{board}/{name} failed:\n{text[-2000:]}")
      runs[name] = run
    lines += ["", f"## {board}: qemu {machine}, {cpu} "
              f"(SysTick calibration: {int(calib['calib_instructions']):,} loop instructions "
              f"= {int(calib['calib_ticks']):,} ticks, "
              f"{int(calib['instructions_per_tick_x1000']) / 1000:g} instructions/tick)", "",
              "| artifact | instructions/inference | FORGE instructions | FORGE share | "
              "vs plain | arena_used | FORGE persistent |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    plain_total = float(np.mean(runs["plain"].ticks))
    for name, run in runs.items():
      total = float(np.mean(run.ticks))
      forge = run.cost_type.get("FORGE_RECALIB", {"ticks": 0})["ticks"] / len(run.ticks)
      lines.append(f"| {ARTIFACT_LABELS[name]} | {total:,.0f} | {forge:,.0f} | "
                   f"{100 * forge / total:.1f}% | {100 * (total / plain_total - 1):+.1f}% | "
                   f"{run.mem['arena_used']:,} B | {run.mem['forge_persistent']:,} B |")
    lines += ["", "instructions/inference per operator type:", "",
              "| artifact | " + " | ".join(runs["forge_all"].cost_type) + " |",
              "| --- |" + " ---: |" * len(runs["forge_all"].cost_type)]
    for name, run in runs.items():
      n = len(run.ticks)
      lines.append(f"| {ARTIFACT_LABELS[name]} | " + " | ".join(
          f"{run.cost_type[t]['ticks'] / n:,.0f}" if t in run.cost_type else "-"
          for t in runs["forge_all"].cost_type) + " |")
    # FORGE per site resolution (21-site artifact).
    run = runs["forge_all"]
    groups = collections.OrderedDict()
    for k, shape in shapes.items():
      groups.setdefault(shape, []).append(run.cost[k]["ticks"] / run.cost[k]["calls"])
    lines += ["", "FORGE_RECALIB per site (21-site artifact), by resolution:", "",
              "| site input | sites | elements/site | instructions/site | "
              "instructions/element |", "| --- | ---: | ---: | ---: | ---: |"]
    for shape, costs in groups.items():
      elements = int(np.prod(shape))
      lines.append(f"| {'x'.join(map(str, shape[1:]))} | {len(costs)} | {elements:,} | "
                   f"{np.mean(costs):,.0f} | {np.mean(costs) / elements:.1f} |")
  lines += ["", f"# build (warm unless the cache was empty) {t_build:.0f} s, "
            f"total {time.time() - t0:.0f} s"]
  emit("\n".join(lines) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
