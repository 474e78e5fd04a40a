"""The ESP-IDF app (and any other target) from export to verdict, artifact by artifact.

For each artifact the issue names (the bundled ResNet-20 with FORGE at 21 sites adapting
and gated on a class-sorted stream, at 3 sites, the plain int8 model with its manifest,
MLPerf Tiny's ResNet-8 with FORGE; MobileNetV2-0.5, whose arena goes to PSRAM), calls what `forge_tflm run-firmware` calls
(forge_tflm.deploy.firmware.run_firmware: export-firmware with its default arena, the
target's build out of the export folder, the emulated run, verify-device) and prints one
row per run: verdict, images identical, the accuracy the device printed and the
evaluator's, and how long export + build + run took here (the first row of a target
includes its cold build). Artifacts are converted once into the build cache (the tests'
conversions: forge_tflm.deploy.targets).

    python benchmarks/run_firmware_targets.py --targets=esp32s3-idf \\
        --output=benchmarks/results/esp32s3_idf.txt

--cost (ESP-IDF app): the ResNet-20 plain and with FORGE at 21 sites (the op's _ansi core,
the app's default, and its S3 variant, CONFIG_FORGE_RECALIB_OPTIMIZED=y), trace=none,
under qemu's -icount shift=0, where CCOUNT counts executed instructions at a fixed rate:
per inference, CCOUNT ticks, FORGE's share and the increase over plain, the figures of
benchmarks/results/esp32s3_cost.txt (the bare-metal app) for the IDF build. Emulated
instructions, not cycles or energy.

    python benchmarks/run_firmware_targets.py --cost --images=4 \\
        --output=benchmarks/results/esp32s3_idf_cost.txt
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import command_line, dated, emit  # noqa: E402


def artifacts(cost_only: bool = False) -> dict[str, str]:
  """label -> .tflite of each artifact run, and "_data"; cost_only: the ResNet-20 ones.
  The others are the parity tests' conversions (tests/deploy/test_mlperf_parity.py,
  test_host_parity_mobilenet.py), shared through the build cache."""
  from forge_tflm.deploy import targets

  r20 = targets.r20_artifacts()
  arts = {"ResNet-20, 21 sites": r20["forge_all"], "ResNet-20, 3 sites": r20["forge_3"],
          "ResNet-20 plain (no site)": r20["plain"]}
  if not cost_only:
    arts["MLPerf ResNet-8, 9 sites"] = targets.cached_conversion(
        os.path.join(targets.MLPERF_IC_DIR, "pretrainedResnet_quant.tflite"),
        "r8_forge_all.tflite", ["--input_range=0,255", "--calibration_size=200"])
    arts["MobileNetV2-0.5, 52 sites, arena in PSRAM"] = targets.cached_conversion(
        os.path.join(REPO_ROOT, "models", "mobilenet_v2_0.5_cifar10.keras"),
        "mbv2_forge_all.tflite", [])
  return {**arts, "_data": targets.DATA_DIR}


def cost(arts: dict, data: str, images: int, argv) -> list[str]:
  from forge_tflm.deploy import firmware, parse_app_output

  none = ("CONFIG_FORGE_APP_TRACE_NONE=y",)
  runs = (("plain int8 (no site)", arts["ResNet-20 plain (no site)"], none),
          ("FORGE, 21 sites, _ansi core (default)", arts["ResNet-20, 21 sites"], none),
          ("FORGE, 21 sites, S3 variant", arts["ResNet-20, 21 sites"],
           none + ("CONFIG_FORGE_RECALIB_OPTIMIZED=y",)))
  lines = [dated(command_line("run_firmware_targets.py", argv)), "",
           f"ESP-IDF app, ResNet-20, first {images} gaussian_noise-5 images, FORGE adapting,"
           " trace=none, qemu-system-xtensa -machine esp32s3 -icount shift=0 (CCOUNT ticks"
           " count executed instructions at a fixed rate; not cycles or energy)", "",
           "| build | CCOUNT ticks/inference | FORGE ticks | FORGE share | vs plain |",
           "| --- | ---: | ---: | ---: | ---: |"]
  plain = None
  for name, path, config in runs:
    with tempfile.TemporaryDirectory() as tmp:
      r = firmware.run_firmware(path, "esp32s3-idf", tmp, data_dir=data, images=images,
                                idf_config=config, icount=True)
      run = parse_app_output(open(r.run.log_path, errors="replace").read())
    per = float(run.ticks.mean())
    forge = run.cost_type.get("FORGE_RECALIB", {}).get("ticks", 0) / len(run.ticks)
    plain = per if plain is None else plain
    total = sum(c["ticks"] for c in run.cost_type.values()) / len(run.ticks)
    lines.append(f"| {name} | {per:,.0f} | {forge:,.0f} | {100 * forge / total:.2f}% | "
                 f"{100 * (per / plain - 1):+.1f}% |")
    print(lines[-1], flush=True)
  return lines


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--targets", default="esp32s3-idf")
  parser.add_argument("--images", type=int, default=200)
  parser.add_argument("--cost", action="store_true")
  parser.add_argument("--output")
  args = parser.parse_args(argv)
  from forge_tflm.deploy import firmware
  from forge_tflm.evaluation import field_streams

  arts = artifacts(cost_only=args.cost)
  if args.cost:
    emit("\n".join(cost(arts, arts.pop("_data"), args.images, argv)) + "\n", args.output)
    return 0
  data = arts.pop("_data")
  runs = [(name, path, {}) for name, path in arts.items()]
  runs.insert(1, ("ResNet-20, 21 sites, gated, class-sorted", arts["ResNet-20, 21 sites"],
                  {"mode": "gated", "label_order": field_streams.LabelOrder("sorted", None, 1)}))
  lines = [dated(command_line("run_firmware_targets.py", argv)), "",
           "| target | artifact | images | verdict | identical | device / evaluator top-1 |"
           " seconds (export, build, run) |", "| --- | --- | ---: | --- | ---: | ---: | ---: |"]
  for target in args.targets.split(","):
    for name, path, extra in runs:
      with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        r = firmware.run_firmware(path, target, tmp, data_dir=data, images=args.images,
                                  **extra)
        v = r.verification
        lines.append(f"| {target} | {name} | {v.images_expected} | "
                     f"{'BIT-EXACT' if v.ok else 'NOT VERIFIED'} | {v.identical} | "
                     f"{100 * (v.accuracy_device or 0):.1f}% / "
                     f"{100 * v.accuracy_expected:.1f}% | {time.time() - t0:.0f} |")
        print(lines[-1], flush=True)
  emit("\n".join(lines) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
