"""Convert a float Keras (.keras, .h5) or ONNX (.onnx) model, or a full-int8 .tflite,
into a full-int8 .tflite with FORGE_RECALIB.

From a float model: finds every Conv->BN(->ReLU/ReLU6) site and converts to full
int8 with TFLiteConverter (BN folded, per-channel weights, int8 input/output)
calibrated on training images. From an int8 .tflite: every conv is a site. Each
site's targets are measured on that int8 model over the calibration images
(--targets=recorded: a float model's BN statistics). Then inserts FORGE_RECALIB
after the selected convs. Writes
OUTPUT (.tflite), OUTPUT's stem + .json (the manifest) and, with --c_array, a C
array for firmware. Outputs appear together or not at all.
"""

from __future__ import annotations

import os
from absl import flags

from forge_tflm.cli.recalib_flags import define_recalib_flags, recalib_flag_values


def define_flags(fv: flags.FlagValues) -> flags.FlagValues:
  """The command's flags, essential ones first (one declaration per flag: a list, not
  logic, so it runs past ~60 lines)."""
  from forge_tflm.artifact import TARGET_SOURCES
  from forge_tflm.converter.options import ConvertOptions
  d = ConvertOptions()
  flags.DEFINE_string("model", None, "Float model (.keras, legacy .h5, or .onnx with its"
                      " BatchNormalization nodes kept), or the full-int8 .tflite you ship"
                      " (targets measured on the calibration images).", flag_values=fv,
                      required=True)
  flags.DEFINE_string("output", None, "Output .tflite path.", flag_values=fv, required=True)
  flags.DEFINE_enum("targets", d.targets, list(TARGET_SOURCES), "FORGE's clean"
                    " targets: measured on the plain int8 model over the calibration"
                    " images (source mode is the plain model bit for bit), or the float"
                    " model's BatchNorm statistics recorded at fold time (the paper's"
                    " design; better when the calibration images are themselves shifted"
                    " from the training data).", flag_values=fv)
  flags.DEFINE_enum("dataset", "cifar10", ["cifar10", "cifar100", "tiny_imagenet"],
                    "Dataset of the calibration images.", flag_values=fv)
  flags.DEFINE_string("data_dir", None, "Local dataset path; unset: tensorflow-datasets"
                      " (offline).", flag_values=fv)
  flags.DEFINE_string("calibration_split", "train", "Split the calibration images come"
                      " from.", flag_values=fv)
  flags.DEFINE_integer("calibration_size", d.calibration_size, "Calibration images.",
                       flag_values=fv)
  flags.DEFINE_string("sites", "all", "'all', 'none', comma-separated site names, or"
                      " @FILE (JSON with a 'sites' list, e.g. from layer selection).",
                      flag_values=fv)
  define_recalib_flags(fv, notes={
      "window": f"Default {d.recalib.window} unless --momentum is given.",
      "eps": "Default: (the conv output's step / 16)^2 with measured targets, each"
              " BN's own epsilon with recorded ones.",
      "variance": f"Default {d.recalib.variance}."})
  flags.DEFINE_list("input_range", ["0", "1"], "Float range the model takes pixels to"
                    " (low,high): x = low + pixel/255*(high-low).", flag_values=fv)
  flags.DEFINE_list("input_mean", None, "Per-channel mean for x = (pixel/255-mean)/std"
                    " (overrides --input_range).", flag_values=fv)
  flags.DEFINE_list("input_std", None, "Per-channel std, with --input_mean.",
                    flag_values=fv)
  flags.DEFINE_string("preact_range", d.preact_range, "With --targets=recorded: 'minmax'"
                      " or 'percentile:P' for the pre-activation ranges of sites with an"
                      " activation.",
                      flag_values=fv)
  flags.DEFINE_bool("c_array", False, "Also write a C array (<stem>_model_data.h/.cc).",
                    flag_values=fv)
  flags.DEFINE_string("plain_output", None, "Also write the plain int8 model (no FORGE)"
                      " here, for baselines.", flag_values=fv)
  flags.DEFINE_enum("parity_check", d.parity_check, ["error", "warn"], "The parity gate:"
                    " a float model that differs from the source model (Keras, or"
                    " onnxruntime) beyond --parity_tolerance is refused (error) or written"
                    " with a warning (warn).", flag_values=fv)
  flags.DEFINE_enum("clean_check", d.clean_check, ["error", "warn"], "The int8 model's"
                    " top-1 on its labelled calibration images: below twice chance (a wrong"
                    " --input_range, usually) it is refused (error) or written with a"
                    " warning (warn).", flag_values=fv)
  flags.DEFINE_float("parity_tolerance", d.parity_tolerance, "Largest error, as a fraction"
                     " of a tensor's range, of any site's BN output or the model output.",
                     flag_values=fv)
  flags.DEFINE_integer("parity_images", d.parity_images, "Calibration images the gate"
                       " compares on.", lower_bound=1, flag_values=fv)
  flags.DEFINE_float("source_agreement", d.source_agreement, "From an int8 .tflite: the"
                     " least top-1 agreement of the artifact in source mode with the input"
                     " model on the calibration images.", lower_bound=0.0, upper_bound=1.0,
                     flag_values=fv)
  return fv


def parse_sites(value: str):
  if value in ("all", "none"):
    return value
  if value.startswith("@"):
    from forge_tflm.converter.select import read_sites_file
    return read_sites_file(value[1:])
  names = tuple(n.strip() for n in value.split(",") if n.strip())
  if not names:
    raise ValueError("--sites is empty")
  return names


def input_contract(fv: flags.FlagValues):
  from forge_tflm.artifact import InputContract
  if fv.input_mean or fv.input_std:
    return InputContract(kind="normalize",
                         mean=tuple(float(v) for v in fv.input_mean or ()),
                         std=tuple(float(v) for v in fv.input_std or ()))
  if len(fv.input_range) != 2:
    raise ValueError("--input_range needs two numbers: low,high")
  low, high = (float(v) for v in fv.input_range)
  return InputContract(kind="range", low=low, high=high)


def _tfds_has(dataset: str) -> bool:
  """Whether tensorflow-datasets has `dataset` prepared locally (its data folder)."""
  root = os.environ.get("TFDS_DATA_DIR", os.path.join(os.path.expanduser("~"),
                                                      "tensorflow_datasets"))
  return os.path.isdir(os.path.join(root, dataset))


def run(fv: flags.FlagValues, command: str) -> int:
  from forge_tflm.converter.options import ConvertOptions

  given = recalib_flag_values(fv)
  options = ConvertOptions(
      sites=parse_sites(fv.sites), targets=fv.targets, recalib=ConvertOptions().recalib.replace(**given),
      eps_from_bn="eps" not in given, input_contract=input_contract(fv),
      calibration_size=fv.calibration_size, preact_range=fv.preact_range,
      c_array=fv.c_array, parity_check=fv.parity_check, clean_check=fv.clean_check,
      parity_tolerance=fv.parity_tolerance, parity_images=fv.parity_images,
      source_agreement=fv.source_agreement)
  # Inputs and outputs next, still before TensorFlow loads (~10 s).
  from forge_tflm.converter import outputs
  from forge_tflm.fileio import check_model_file
  check_model_file(fv.model, "--model")  # Exists, and its first bytes fit its extension.
  if fv.data_dir is not None and not os.path.exists(fv.data_dir):
    raise ValueError(f"--data_dir {fv.data_dir!r} does not exist")
  if fv.data_dir is None and not _tfds_has(fv.dataset):
    raise ValueError(f"no local copy of {fv.dataset} for tensorflow-datasets: give the"
                     " calibration images' folder with --data_dir (e.g."
                     " --data_dir=../shared/datasets/cifar10)")
  outputs.check_output_paths(outputs.output_paths(fv.output, fv.c_array, fv.plain_output),
                             fv.model)
  # All valid: only now load TensorFlow and the data.
  from forge_tflm.quiet import import_quietly
  import_quietly("tensorflow", "keras")
  from forge_tflm.converter.pipeline import convert
  from forge_tflm.data import load_dataset
  calibration = load_dataset(fv.dataset, fv.calibration_split, fv.data_dir)
  result = convert(fv.model, fv.output, calibration, options, command=command,
                   plain_output=fv.plain_output)
  m = result.manifest
  print(f"wrote {', '.join(result.written)}: {len(m.sites)} FORGE sites,"
        f" {m.channels} channels, {m.state_bytes} B state (SRAM),"
        f" {m.target_bytes} B targets (flash), {result.seconds:.1f} s")
  p = m.parity
  if "float_vs_source" in p:
    print(f"parity on {p['images']} images: float model vs source output error "
          f"{p['float_vs_source']['output_max_error']:.2g}, top-1 agreement "
          f"{100 * p['float_vs_source']['top1_agreement']:.1f}%; int8 vs float top-1 "
          f"agreement {100 * p['int8_vs_float']['top1_agreement']:.1f}%")
  if "source_mode_vs_input" in p:
    q = p["source_mode_vs_input"]
    print(f"targets measured on {m.targets.get('images')} images; source mode vs the plain"
          f" int8 model on {q['images']} images: top-1 agreement"
          f" {100 * q['top1_agreement']:.1f}%, largest output difference"
          f" {q['max_output_difference']:.3g}")
  elif m.targets.get("source") == "recorded":
    print("targets: the BatchNorm statistics recorded at fold time (--targets=recorded)")
  return 0
