"""TFLite-Micro memory of the bundled ResNet-20 with and without FORGE, per target.

Builds and runs the app core (esp32s3_app) for one image, FORGE adapting, on:

  reference  x86-64 host, TFLM reference kernels         (64-bit pointers)
  esp_nn     x86-64 host, esp-tflite-micro + ESP-NN ansi (64-bit pointers)
  an386      qemu Cortex-M4F, TFLM + CMSIS-NN            (32-bit: what MCUs have)
  an547      qemu Cortex-M55, TFLM + CMSIS-NN (Helium)   (32-bit)

for the artifact converted with FORGE at 21 sites, at 3 sites and without FORGE, and
prints per target and artifact: arena_used (TFLM's MicroInterpreter::arena_used_bytes),
what FORGE adds over the plain model, split into its state (8 B per adapted channel),
its op data, and the rest (TFLM's own per-node bookkeeping: the node, three eval
tensors, a scratch handle, and alignment), next to the manifest's 32-bit figures
(forge_tflm.ops.memory, `totals.memory` in the manifest); FORGE's largest scratch request
and whether the non-persistent (activation) part of the arena grew; and flash: the model
with/without FORGE and the FORGE objects' code+data (`size`, before the linker's
--gc-sections: an upper bound).

    python benchmarks/bench_mcu_memory.py --output=benchmarks/results/mcu_memory.md
"""

from __future__ import annotations

import argparse
import datetime
import glob
import os
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import emit  # noqa: E402

from forge_tflm.deploy import firmware, targets  # noqa: E402

LABELS = {"forge_all": "FORGE, 21 sites", "forge_3": "FORGE, 3 sites", "plain": "plain int8"}
HOST_TARGETS = ("reference", "esp_nn")


def _size(tool: str, objects: list[str]) -> tuple[int, list[str]]:
  """text + data + bss of the objects, from binutils' `size`; and the objects that
  hold any (every target compiles every variant's source, empty off its target)."""
  if not objects:
    raise RuntimeError("no FORGE objects found (the build folder's layout changed?)")
  r = subprocess.run([tool, "-t"] + objects, capture_output=True, text=True, check=True)
  rows = [line.split() for line in r.stdout.strip().splitlines()[1:]]
  total = rows[-1]
  held = [row[-1] for row in rows[:-1] if sum(int(v) for v in row[:3])]
  return int(total[0]) + int(total[1]) + int(total[2]), held


def run_host(target: str, artifacts: dict, x_by_name: dict, work: str) -> dict:
  from forge_tflm import deploy

  binary = targets.build_host(target)
  out = {}
  for name, path in artifacts.items():
    images = deploy.write_image_stream(os.path.join(work, f"{name}.bin"), x_by_name[name])
    r = subprocess.run([binary, path, images, "--images=1", "--trace=none"],
                       capture_output=True, text=True)
    run = deploy.parse_app_output(r.stdout)
    if r.returncode != 0 or not run.ok:
      raise RuntimeError(f"{target}/{name} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    out[name] = run.mem
  kind = "host" if target == "reference" else f"host-{target}"  # as build_host names it
  code, objs = _size("size", sorted(glob.glob(os.path.join(targets.build_dir(kind), "forge",
                                                          "*.o"))))
  return {"mem": out, "code": code, "objects": objs}


def run_board(board: str, artifacts: dict, x_by_name: dict) -> dict:
  from forge_tflm import deploy

  targets.make_cortexm(board, ["lib"])
  out = {}
  for name, path in artifacts.items():
    elf = targets.build_cortexm_elf(board, targets.gen_dir_for(path, x_by_name[name], name))
    text, _ = targets.run_cortexm(board, elf, "--trace=none")
    run = deploy.parse_app_output(text)
    if not run.ok:
      raise RuntimeError(f"{board}/{name} failed:\n{text[-2000:]}")
    out[name] = run.mem
  code, objs = _size("arm-none-eabi-size", sorted(glob.glob(
      os.path.join(targets.build_dir(f"cortexm-{board}"), "forge", "*.o"))))
  return {"mem": out, "code": code, "objects": objs}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--targets", default="reference,esp_nn,an386,an547")
  ap.add_argument("--output", default=None, help="also write the report here")
  args = ap.parse_args(argv)
  wanted = [t for t in args.targets.split(",") if t]
  why = any(t in targets.BOARDS for t in wanted) and firmware.missing_tools("cortex-m4f")
  if why:
    print(f"cannot run the Cortex-M targets: {why}")
    return 2

  from forge_tflm import deploy
  from forge_tflm.artifact import Artifact

  t0 = time.time()
  artifacts = {n: targets.artifact_paths()[n] for n in LABELS}
  stream = deploy.corrupted_stream(targets.DATA_DIR, "gaussian_noise", 5,
                                   limit=targets.STREAM_LIMIT)
  x_by_name = {n: deploy.model_input(p, stream.images[:1]) for n, p in artifacts.items()}
  manifests = {n: Artifact.load(p).manifest for n, p in artifacts.items() if n != "plain"}
  results = {}
  with tempfile.TemporaryDirectory() as work:
    for t in wanted:
      results[t] = (run_board(t, artifacts, x_by_name) if t in targets.BOARDS
                    else run_host(t, artifacts, x_by_name, work))

  lines = [f"# {datetime.date.today()}: python benchmarks/bench_mcu_memory.py "
           f"{' '.join(argv if argv is not None else sys.argv[1:])}",
           "# bundled ResNet-20 (models/resnet20_cifar10.keras), one gaussian_noise-5 "
           "CIFAR-10 image, batch 1, FORGE adapting; TFLM 90b983c (hosts: x86-64 gcc; "
           "boards: arm-none-eabi-gcc -O2 under qemu-system-arm)", "",
           "## Arena (bytes)", "",
           "FORGE adds = arena_used - plain's. state / op data: FORGE's persistent buffers "
           "(counted by the app); rest: TFLM's bookkeeping for the extra nodes and "
           "tensors, and alignment. manifest: `totals.memory.arena_added_bytes_32bit` "
           "(state + op data + TFLM node bytes of a 32-bit target); on the 32-bit boards "
           "FORGE adds - manifest is only the alignment of TFLM's node and tensor arrays, so "
           "the non-persistent (activation) part of the arena did not grow: FORGE's output "
           "and its scratch fit under the plain model's peak.", "",
           "| target | artifact | arena_used | FORGE adds | state | op data | rest | "
           "manifest (32-bit) | FORGE scratch (largest) |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
  for t in wanted:
    mem = results[t]["mem"]
    plain = mem["plain"]["arena_used"]
    for name in artifacts:
      m = mem[name]
      if name == "plain":
        lines.append(f"| {t} | {LABELS[name]} | {m['arena_used']:,} | - | - | - | - | - | - |")
        continue
      adds = m["arena_used"] - plain
      op_data = m["forge_persistent"] - m["forge_state"]
      rest = adds - m["forge_persistent"]
      memory = manifests[name].memory_json()
      largest = max(s.memory.scratch_table for s in manifests[name].sites)
      lines.append(f"| {t} | {LABELS[name]} | {m['arena_used']:,} | {adds:,} | "
                   f"{m['forge_state']:,} | {op_data:,} | {rest:,} | "
                   f"{memory['arena_added_bytes_32bit']:,} | {largest:,} |")
  lines += ["", "## Flash (bytes)", "",
            "| target | FORGE objects (code + data, before --gc-sections; empty ones left out) |",
            "| --- | ---: |"]
  for t in wanted:
    names = ", ".join(os.path.basename(o) for o in results[t]["objects"])
    lines.append(f"| {t} | {results[t]['code']:,} ({names}) |")
  sizes = {n: os.path.getsize(p) for n, p in artifacts.items()}
  lines += ["", "| artifact | .tflite bytes | vs plain | of which targets (beta, abs(gamma)) |",
            "| --- | ---: | ---: | ---: |"]
  for name in artifacts:
    targets_bytes = manifests[name].target_bytes if name in manifests else 0
    lines.append(f"| {LABELS[name]} | {sizes[name]:,} | {sizes[name] - sizes['plain']:+,} | "
                 f"{targets_bytes:,} |")
  lines += ["", f"# total {time.time() - t0:.0f} s"]
  emit("\n".join(lines) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
