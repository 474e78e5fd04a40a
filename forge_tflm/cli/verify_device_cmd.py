"""Check a device log against the expected outputs of the exported firmware.

`forge_tflm verify-device LOG --expected=DIR_OR_JSON`: LOG is what the app printed
on any target (an ESP32-S3 serial capture, e.g. `idf.py monitor | tee log.txt`, or
the host / Cortex-M output); --expected is the expected.json (or the folder) that
`forge_tflm export-firmware` wrote for the same firmware. Reports bit-exactness image
by image (first divergence), accuracy with and without FORGE, time per image and
per operator. Every value the device prints that the host predicts is compared
(predictions, logits, checksums, the gate's path and decisions, the header); any
difference makes the verdict NOT VERIFIED, naming the image or line and the field.
With --ppk2=CSV (the Power Profiler app's export with the digital channels) it
integrates energy per phase between the app's GPIO markers and prints the paper's
Table 10 layout; a sample that is not finite, a negative current or a time that does
not increase is refused with its line. Exit status 0 only when every image is
bit-exact.
"""

from __future__ import annotations

import json
import os

from absl import flags

POSITIONAL = "log"  # forge_tflm verify-device LOG


def define_flags(fv: flags.FlagValues) -> flags.FlagValues:
  flags.DEFINE_string("log", None, "Captured app output (text).", flag_values=fv)
  flags.DEFINE_string("expected", os.path.join("esp32s3_app", "main", "generated"),
                      "expected.json from export-firmware, or its folder.", flag_values=fv)
  flags.DEFINE_string("ppk2", None, "PPK2 CSV export (Timestamp, Current, digital"
                      " channels) of the same run.", flag_values=fv)
  flags.DEFINE_float("ppk2_voltage", 3.3, "Supply voltage the PPK2 sourced (V).",
                     flag_values=fv)
  flags.DEFINE_integer("ppk2_inference_channel", 0, "PPK2 digital input wired to the"
                       " inference marker (CONFIG_FORGE_APP_INFERENCE_GPIO).",
                       lower_bound=0, upper_bound=7, flag_values=fv)
  flags.DEFINE_integer("ppk2_forge_channel", 1, "PPK2 digital input wired to the FORGE"
                       " marker (CONFIG_FORGE_APP_FORGE_GPIO).", lower_bound=0,
                       upper_bound=7, flag_values=fv)
  flags.DEFINE_string("json", None, "Also write the result here (JSON).", flag_values=fv)
  return fv


def run(fv: flags.FlagValues, command: str) -> int:
  from forge_tflm.deploy import ppk2
  from forge_tflm.deploy.export import load_expected
  from forge_tflm.deploy.verify import decode_log, verify

  if not fv.log:
    raise ValueError("which log? forge_tflm verify-device LOG --expected=DIR")
  try:
    with open(fv.log, "rb") as f:
      text = decode_log(f.read())
  except OSError as e:
    raise ValueError(f"cannot read {fv.log}: {e.strerror}") from e
  expected = load_expected(fv.expected)
  try:
    result = verify(text, expected)
  except ValueError as e:  # The log's problem: name the file.
    raise ValueError(f"{fv.log}: {e}") from e
  report = result.markdown()
  energy = None
  if fv.ppk2:
    if fv.ppk2_inference_channel == fv.ppk2_forge_channel:
      raise ValueError("--ppk2_inference_channel and --ppk2_forge_channel must differ")
    capture = ppk2.read_capture(fv.ppk2)
    try:
      pe = ppk2.phase_energy(capture, fv.ppk2_voltage, fv.ppk2_inference_channel,
                             fv.ppk2_forge_channel)
    except ValueError as e:
      raise ValueError(f"{fv.ppk2}: {e}") from e
    report += "\n" + ppk2.table10(pe) + "\n"
    if len(pe.total_j) != result.images_logged:
      report += (f"\nnote: the capture holds {len(pe.total_j)} inference pulses, the log "
                 f"{result.images_logged} images (capture started late or ended early?)\n")
    energy = {"images": len(pe.total_j),
              "inference_mj": (pe.inference_j * 1e3).tolist(),
              "total_mj": (pe.total_j * 1e3).tolist(), "forge_mj": (pe.forge_j * 1e3).tolist(),
              "total_ms": (pe.total_s * 1e3).tolist(), "forge_ms": (pe.forge_s * 1e3).tolist()}
  print(report, end="")
  if fv.json:
    doc = {"command": command, "ok": result.ok, "images_expected": result.images_expected,
           "images_logged": result.images_logged, "identical": result.identical,
           "first_divergence": result.first_divergence, "problems": result.problems,
           "accuracy_device": result.accuracy_device,
           "accuracy_expected": result.accuracy_expected,
           "accuracy_source": result.accuracy_source, "energy": energy}
    with open(fv.json + ".partial", "w") as f:
      json.dump(doc, f, indent=2)
    os.replace(fv.json + ".partial", fv.json)
  return 0 if result.ok else 1
