"""Write a firmware's inputs and expected outputs for one artifact and image stream.

Into --output_dir (default esp32s3_app/main/generated, which the ESP-IDF app
compiles): forge_app_data.h/.cc (the model as an alignas(16) array, the int8
images and labels of the stream, FORGE_APP_ARENA_BYTES; the header names this
command), images.bin (the same images, raw, for the host binary) and
expected.json (the evaluator at batch 1 in reference kernel mode with the same
adaptation, what `forge_tflm verify-device` compares a device log with). The
stream is the evaluator's: `forge_tflm eval --corruptions=C --severity=S
--limit=N --seed=K --batch_size=1 [--label_order=L]` in ordering --ordering. The
artifact must match its manifest.

All or nothing: --output_dir is checked first (it may hold only an earlier export's
files, as it is replaced whole), the new set is written into a fresh folder beside
it and swapped in with one rename; on any failure nothing changes.
"""

from __future__ import annotations

from absl import flags, logging

from forge_tflm.cli.eval_cmd import define_gate_flags, gate_config
from forge_tflm.deploy.export import DEFAULT_OUT
from forge_tflm.evaluation import field_streams
from forge_tflm.evaluation.gate import DEVICE_PERIOD

POSITIONAL = "artifact"  # forge_tflm export-firmware ARTIFACT


def define_flags(fv: flags.FlagValues) -> flags.FlagValues:
  flags.DEFINE_string("artifact", None, "Converted .tflite (its manifest .json beside"
                      " it).", flag_values=fv)
  flags.DEFINE_string("output_dir", DEFAULT_OUT, "Where to write (created).",
                      flag_values=fv)
  flags.DEFINE_enum("dataset", "cifar10", ["cifar10", "cifar100", "tiny_imagenet"],
                    "Dataset of the clean images.", flag_values=fv)
  flags.DEFINE_string("data_dir", None, "Local dataset path (as forge_tflm eval).",
                      flag_values=fv)
  flags.DEFINE_string("corruption", "gaussian_noise", "A corruption name, or 'clean'.",
                      flag_values=fv)
  flags.DEFINE_integer("severity", 5, "Severity 1-5.", lower_bound=1, upper_bound=5,
                       flag_values=fv)
  flags.DEFINE_integer("images", 200, "Stream length (eval's --limit).", lower_bound=1,
                       flag_values=fv)
  flags.DEFINE_integer("seed", 0, "Subset, corruption and ordering seed (eval's --seed).",
                       lower_bound=0, upper_bound=2**32 - 1, flag_values=fv)
  flags.DEFINE_integer("ordering", 0, "Which shuffled ordering (eval's k < --orderings).",
                       lower_bound=0, upper_bound=999, flag_values=fv)
  flags.DEFINE_enum("mode", "adapt", ["adapt", "frozen", "gated"], "FORGE adapting (the"
                    " default), frozen at its clean targets, or gated (the field controller's"
                    f" defaults, re-probing every {DEVICE_PERIOD} images), as the firmware"
                    " will run (the ESP-IDF app runs the exported mode).",
                    flag_values=fv)
  flags.DEFINE_enum("label_order", "shuffled", list(field_streams.LABEL_ORDERS),
                    "Labels in the stream, as eval's --label_order: shuffled, dirichlet"
                    " (--dirichlet_alpha, one image per slot) or sorted (by class).",
                    flag_values=fv)
  flags.DEFINE_float("dirichlet_alpha", 0.1, "Concentration of --label_order=dirichlet.",
                     lower_bound=1e-6, flag_values=fv)
  flags.DEFINE_integer("arena_bytes", None, "TFLM arena size; default: estimated from the"
                       " model and manifest (forge_tflm.deploy.arena).", lower_bound=1024,
                       flag_values=fv)
  define_gate_flags(fv)  # --mode=gated's settings, as eval's (a device's period unset).
  return fv


def export_args(fv: flags.FlagValues, command: str) -> dict:
  """export_firmware's keyword arguments from these flags (run-firmware's too)."""
  return dict(data_dir=fv.data_dir, dataset=fv.dataset, corruption=fv.corruption,
              severity=fv.severity, images=fv.images, seed=fv.seed,
              ordering_index=fv.ordering, mode=fv.mode, arena_bytes=fv.arena_bytes,
              command=command, gate=gate_config(fv),
              label_order=field_streams.LabelOrder(
                  fv.label_order,
                  fv.dirichlet_alpha if fv.label_order == "dirichlet" else None, 1))


def run(fv: flags.FlagValues, command: str) -> int:
  from forge_tflm.deploy.export import export_firmware

  if not fv.artifact:
    raise ValueError("which artifact? forge_tflm export-firmware ARTIFACT.tflite")
  out = export_firmware(fv.artifact, fv.output_dir, **export_args(fv, command))
  logging.info("wrote %s: %d images of %s, arena %d B; expected accuracy %.2f%% with "
               "FORGE (%s), %.2f%% frozen at the clean targets", out.out_dir, out.images,
               out.stream, out.arena_bytes, 100 * out.accuracy, fv.mode,
               100 * out.accuracy_source)
  return 0
