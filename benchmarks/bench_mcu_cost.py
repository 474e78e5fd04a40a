"""Instructions per inference and FORGE's share on Cortex-M (qemu-system-arm).

Builds esp32s3_app/cortexm (TFLite-Micro + CMSIS-NN + FORGE, built and run by
forge_tflm.deploy.targets as tests/deploy/test_cortexm.py does) for the Cortex-M4F
(mps2-an386, CMSIS-NN DSP path), the Cortex-M55 (mps3-an547, CMSIS-NN Helium/MVE path)
and, with --boards, the FPU-less Cortex-M3 (mps2-an385, CMSIS-NN's C path; FORGE's float
op in soft-float, its integer option built alone, FORGE_ARITH=int), runs the bundled
ResNet-20 converted with FORGE at 21 sites, at 3 sites, at 21 sites with the integer
arithmetic (--arithmetic=int) and without FORGE (plain int8), as --artifacts picks, on
the first --images gaussian_noise-5 CIFAR-10 test images at batch 1 with FORGE adapting,
under `qemu-system-arm -icount shift=0` with trace=none, and prints:

  - per artifact: instructions per inference, FORGE's instructions and share,
    TFLM arena_used (32-bit target) and FORGE's persistent bytes;
  - per operator type: instructions per inference;
  - per FORGE site resolution: instructions per site call and per element (H*W*C),
    one column pair per 21-site artifact (float op, integer option).

Instruction counts: with -icount shift=0 each instruction is 1 ns of virtual time and
SysTick counts at the board's processor clock; the target calibrates instructions per
tick with a loop of known length at boot (40 on the an386, 31.25 on the an547) and the
app core's MicroProfiler reads that clock around every operator (resolution: one
SysTick tick; the clock read itself, ~30 instructions, is inside each op's count).

    python benchmarks/bench_mcu_cost.py --output=benchmarks/results/mcu_cost.txt
    python benchmarks/bench_mcu_cost.py --boards=an386,an547,an385 \
        --artifacts=forge_all,forge_int,plain --output=benchmarks/results/mcu_cost_int.txt
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import command_line, dated, emit  # noqa: E402

from forge_tflm.deploy import firmware, targets  # noqa: E402

ARTIFACT_LABELS = {"forge_all": "FORGE, 21 sites", "forge_3": "FORGE, 3 sites",
                   "forge_int": "FORGE int, 21 sites", "plain": "plain int8"}
SITES_21 = ("forge_all", "forge_int")  # per-site tables: the 21-site artifacts


def forge_site_shapes(path: str) -> dict[int, tuple[int, ...]]:
  """FORGE op index -> its input shape (N, H, W, C)."""
  from forge_tflm import tflite_graph as tg

  with open(path, "rb") as f:
    model = tg.load_model(f.read())
  sg = model.subgraphs[0]
  return {k: tuple(int(d) for d in sg.tensors[op.inputs[0]].shape)
          for k, op in enumerate(sg.operators) if tg.op_name(model, op) == tg.FORGE_RECALIB}


def run_board(board: str, names: list[str], artifacts, stream, images: int):
  """name -> parsed trace=none run of that artifact on `board`; and the calibration."""
  from forge_tflm import deploy

  runs, calib = {}, None
  for name in names:
    x = deploy.model_input(artifacts[name], stream.images[:images])
    elf = targets.build_cortexm_elf(board, targets.gen_dir_for(artifacts[name], x, name),
                                    arith=targets.forge_arith(board, name))
    text, calib = targets.run_cortexm(board, elf, "--trace=none")
    run = deploy.parse_app_output(text)
    if not run.ok or len(run.ticks) != images:
      raise RuntimeError(f"{board}/{name} failed:\n{text[-2000:]}")
    runs[name] = run
  return runs, calib


def totals_table(runs) -> list[str]:
  """Per artifact: instructions, FORGE's share, vs plain, arena; then per op type."""
  lines = ["| artifact | instructions/inference | FORGE instructions | FORGE share | "
           "vs plain | arena_used | FORGE persistent |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
  plain_total = float(np.mean(runs["plain"].ticks)) if "plain" in runs else None
  for name, run in runs.items():
    total = float(np.mean(run.ticks))
    forge = run.cost_type.get("FORGE_RECALIB", {"ticks": 0})["ticks"] / len(run.ticks)
    vs = f"{100 * (total / plain_total - 1):+.1f}%" if plain_total else "-"
    lines.append(f"| {ARTIFACT_LABELS[name]} | {total:,.0f} | {forge:,.0f} | "
                 f"{100 * forge / total:.2f}% | {vs} | "
                 f"{run.mem['arena_used']:,} B | {run.mem['forge_persistent']:,} B |")
  types = list(next(iter(runs.values())).cost_type)
  lines += ["", "instructions/inference per operator type:", "",
            "| artifact | " + " | ".join(types) + " |", "| --- |" + " ---: |" * len(types)]
  for name, run in runs.items():
    n = len(run.ticks)
    lines.append(f"| {ARTIFACT_LABELS[name]} | " + " | ".join(
        f"{run.cost_type[t]['ticks'] / n:,.0f}" if t in run.cost_type else "-"
        for t in types) + " |")
  return lines


def field_table(runs) -> list[str]:
  """The field configuration at the device's gate defaults, amortized over a stream: a
  probe of P images every D images runs each probed image twice (source, then adapt),
  so an image costs (1 + P/D) x the FORGE artifact's inference at most (the source
  pass runs FORGE in source mode, which skips the statistics). The controller's own
  work (a softmax of the K outputs per probed image, a K-entry histogram per image) is
  not in the count."""
  from forge_tflm.evaluation import gate

  if "plain" not in runs or "forge_all" not in runs:
    return []
  plain = float(np.mean(runs["plain"].ticks))
  forge = float(np.mean(runs["forge_all"].ticks))
  probe = int(gate.settings(gate.GateConfig())["probe_images"])
  lines = ["", "the field configuration (FORGE, 21 sites, with the gate re-probing), "
           "amortized over a stream, vs plain:", "",
           "| gate period D | probe P | probed share P/D | instructions/image "
           "(upper bound) | vs plain |", "| ---: | ---: | ---: | ---: | ---: |"]
  for period in sorted({1024, gate.DEVICE_PERIOD}):
    per_image = forge * (1 + probe / period)
    mark = " (the device default)" if period == gate.DEVICE_PERIOD else ""
    lines.append(f"| {period:,}{mark} | {probe} | {100 * probe / period:.1f}% | "
                 f"{per_image:,.0f} | {100 * (per_image / plain - 1):+.1f}% |")
  return lines


def site_table(runs, shapes, columns=None,
               title="FORGE_RECALIB per site (21-site artifacts), by resolution:") -> list[str]:
  """FORGE per site resolution: instructions per site call and per element, one column
  pair per (run key, label) in `columns` (default: each 21-site artifact run)."""
  if columns is None:
    columns = [(n, ARTIFACT_LABELS[n]) for n in SITES_21 if n in runs]
  if not columns:
    return []
  head = " | ".join(f"{label}: instructions/site | instructions/element"
                    for _, label in columns)
  lines = ["", title, "", f"| site input | sites | elements/site | {head} |",
           "| --- | ---: | ---: |" + " ---: | ---: |" * len(columns)]
  groups = collections.OrderedDict()
  for k, shape in shapes.items():
    groups.setdefault(shape, []).append(k)
  for shape, ops in groups.items():
    elements = int(np.prod(shape))
    cells = []
    for key, _ in columns:
      cost = np.mean([runs[key].cost[k]["ticks"] / runs[key].cost[k]["calls"] for k in ops])
      cells.append(f"{cost:,.0f} | {cost / elements:.1f}")
    lines.append(f"| {'x'.join(map(str, shape[1:]))} | {len(ops)} | {elements:,} | "
                 + " | ".join(cells) + " |")
  return lines


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--images", type=int, default=4, help="images per run (costs are "
                  "data-independent to <0.01%%; the mean is reported)")
  ap.add_argument("--boards", default="an386,an547", help="of an386, an547, an385")
  ap.add_argument("--artifacts", default="forge_all,forge_3,plain",
                  help=f"of {', '.join(ARTIFACT_LABELS)}")
  ap.add_argument("--output", default=None, help="also write the report here")
  args = ap.parse_args(argv)

  why = firmware.missing_tools("cortex-m4f")
  if why:
    print(f"cannot run: {why}")
    return 2
  from forge_tflm import deploy

  t0 = time.time()
  boards = [b for b in args.boards.split(",") if b]
  names = [n for n in args.artifacts.split(",") if n]
  for board in boards:
    targets.make_cortexm(board, ["lib"])
  t_build = time.time() - t0
  artifacts = targets.artifact_paths()
  stream = deploy.corrupted_stream(targets.DATA_DIR, "gaussian_noise", 5,
                                   limit=targets.STREAM_LIMIT)
  shapes = forge_site_shapes(artifacts["forge_all"])
  lines = header_lines(argv, args.images)
  for board in boards:
    machine, cpu, _ = targets.BOARDS[board]
    runs, calib = run_board(board, names, artifacts, stream, args.images)
    lines += ["", f"## {board}: qemu {machine}, {cpu} "
              f"(SysTick calibration: {int(calib['calib_instructions']):,} loop instructions "
              f"= {int(calib['calib_ticks']):,} ticks, "
              f"{int(calib['instructions_per_tick_x1000']) / 1000:g} instructions/tick)", ""]
    lines += totals_table(runs) + field_table(runs) + site_table(runs, shapes)
  lines += ["", f"# build (warm unless the cache was empty) {t_build:.0f} s, "
            f"total {time.time() - t0:.0f} s"]
  emit("\n".join(lines) + "\n", args.output)
  return 0


def header_lines(argv, images: int) -> list[str]:
  """Provenance: date, command, commit (+ a dirty tree's mark), setup."""
  import subprocess

  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=REPO_ROOT).stdout.strip() or "unknown"
  dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                         capture_output=True, text=True, cwd=REPO_ROOT).stdout.strip()
  return [dated(command_line("bench_mcu_cost.py", argv)),
          f"# commit {commit}{' + uncommitted changes' if dirty else ''}",
          f"# bundled ResNet-20 (models/resnet20_cifar10.keras), first {images} "
          f"gaussian_noise-5 CIFAR-10 test images, batch 1, FORGE adapting, trace=none; "
          f"TFLM 90b983c + CMSIS-NN 4ab83cc kernels, arm-none-eabi-gcc -O2, "
          f"qemu-system-arm -icount shift=0 (instructions)"]


if __name__ == "__main__":
  sys.exit(main())
