"""Export an artifact, build a firmware, run it under an emulator and verify it.

`forge_tflm run-firmware ARTIFACT --target=TARGET --data_dir=...` is
export-firmware -> build -> emulated run -> verify-device in one command, with the
stream flags of export-firmware. Into --output_dir: export/ (export-firmware's files),
device.log (what the firmware printed), verify.md (the verdict) and the target's image
(the ELF or binary; flash.bin for esp32s3-idf). Library objects live in the build cache
($FORGE_TFLM_BUILD_CACHE), never in the export folder; the third-party sources, the
Xtensa tool chain, ESP-IDF v5.1.7 and the ESP32-S3 emulator come from ../shared
(prepared once), the Arm tools from apt. The first build of a target takes minutes
(ESP-IDF's the longest); later ones recompile the exported data and link.

Exit status 0 when the run is BIT-EXACT; 1 when it is not, or on an error (a missing
tool's message says how to get it; a failed build's ends with the build's last lines). On a board, flash instead:
docs/usage/deploying.md "ESP-IDF".
"""

from __future__ import annotations

import os

from absl import flags, logging

from forge_tflm.cli import export_firmware_cmd
from forge_tflm.deploy.firmware import TARGETS

POSITIONAL = "artifact"  # forge_tflm run-firmware ARTIFACT


def define_flags(fv: flags.FlagValues) -> flags.FlagValues:
  flags.DEFINE_enum("target", None, list(TARGETS), "Required. Where to run: host (x86,"
                    " TFLM reference kernels), cortex-m4f / cortex-m55 / cortex-m3"
                    " (qemu-system-arm, CMSIS-NN), esp32s3 (bare metal) or esp32s3-idf (the"
                    " ESP-IDF app booted from its flash image) under the ESP32-S3 emulator.",
                    flag_values=fv)
  export_firmware_cmd.define_flags(fv)
  fv.set_default("output_dir", None)
  fv["output_dir"].help = ("Where to write export/, device.log and verify.md (default"
                           " runs/firmware-TARGET).")
  flags.DEFINE_integer("timeout", 1800, "Seconds the emulated run may take.", lower_bound=1,
                       flag_values=fv)
  return fv


def run(fv: flags.FlagValues, command: str) -> int:
  from forge_tflm.deploy.firmware import run_firmware

  if not fv.artifact:
    raise ValueError("which artifact? forge_tflm run-firmware ARTIFACT.tflite "
                     "--target=esp32s3-idf --data_dir=...")
  if not fv.target:
    raise ValueError(f"--target is required: one of {', '.join(TARGETS)}")
  out_dir = fv.output_dir or os.path.join("runs", f"firmware-{fv.target}")
  result = run_firmware(fv.artifact, fv.target, out_dir, timeout=fv.timeout,
                        progress=logging.info,
                        **export_firmware_cmd.export_args(fv, command))
  report = result.verification.markdown()
  with open(os.path.join(out_dir, "verify.md"), "w") as f:
    f.write(report)
  print(report, end="")
  print(f"\nlog: {result.run.log_path}; the run took {result.run.seconds:.0f} s of wall "
        "clock here" + ("" if fv.target == "host" else " (under an emulator: times above are "
                        "not the chip's)"))
  return 0 if result.verification.ok else 1
