"""Stream corrupted images through the deployable artifact and baselines.

Each corruption is one stream, shuffled (K orderings give mean +- std); int8
methods (source, forge, forge-gated, scale-adapt) run the converted .tflite in
the LiteRT interpreter with FORGE nodes in the C core, float methods
(source-fp32, bn-adapt, tent) run the Keras model. Writes results.json (with the
command and artifact hash), results.csv, results.md and results.png to
--output_dir.
"""

from __future__ import annotations

from absl import flags

from forge_tflm.evaluation.gate import SIGNALS, GateConfig
from forge_tflm.evaluation.protocol import ALL_METHODS
from forge_tflm.cli.recalib_flags import define_recalib_flags, recalib_flag_values


def define_flags(fv: flags.FlagValues) -> flags.FlagValues:
  flags.DEFINE_string("artifact", None, "Converted .tflite with FORGE_RECALIB (its"
                      " manifest .json next to it gives the input contract).",
                      flag_values=fv)
  flags.DEFINE_string("keras_model", None, "Float .keras model, for the fp32 methods.",
                      flag_values=fv)
  flags.DEFINE_list("methods", ["source", "forge"], "Methods: " + ", ".join(ALL_METHODS),
                    flag_values=fv)
  flags.DEFINE_enum("dataset", "cifar10", ["cifar10", "cifar100", "tiny_imagenet"],
                    "Dataset of the clean images.", flag_values=fv)
  flags.DEFINE_string("data_dir", None, "Local dataset path; unset: tensorflow-datasets.",
                      flag_values=fv)
  flags.DEFINE_string("split", None, "Clean split (default: test; val for"
                      " tiny_imagenet).", flag_values=fv)
  flags.DEFINE_enum("corrupted_from", "generated", ["generated", "cifar_c", "tfds"],
                    "generated: this package's generators (cached); cifar_c: an official"
                    " CIFAR-10-C/100-C .npy directory (--cifar_c_dir); tfds:"
                    " cifar10_corrupted.", flag_values=fv)
  flags.DEFINE_string("cifar_c_dir", None, "CIFAR-C directory for"
                      " --corrupted_from=cifar_c.", flag_values=fv)
  flags.DEFINE_list("corruptions", ["all"], "Corruption names or 'all' (the 15).",
                    flag_values=fv)
  flags.DEFINE_integer("severity", 5, "Severity 1-5.", flag_values=fv)
  flags.DEFINE_bool("include_clean", False, "Also evaluate the clean stream.",
                    flag_values=fv)
  flags.DEFINE_integer("limit", 0, "Use a random subset of N images per stream (0: all).",
                       flag_values=fv)
  flags.DEFINE_integer("batch_size", 64, "Batch size (1 allowed).", flag_values=fv)
  flags.DEFINE_integer("orderings", 1, "Shuffled orderings per stream (K).",
                       flag_values=fv)
  flags.DEFINE_integer("seed", 0, "Seed of orderings, corruptions and subsets.",
                       flag_values=fv)
  flags.DEFINE_enum("kernels", "optimized", ["optimized", "reference"],
                    "reference = device numerics (BUILTIN_REF); optimized = fast.",
                    flag_values=fv)
  define_recalib_flags(fv, prefix="Override the artifact's FORGE option: ")
  flags.DEFINE_enum("gate_signal", GateConfig.signal, SIGNALS,
                    "Gate score over the probe: diversity_gain = entropy of the mean"
                    " prediction, adapting minus source (does adapting undo the"
                    " source's class collapse?); confidence_gain = adapting minus"
                    " source mean top-1 confidence; confidence_drop = clean reference"
                    " minus source confidence (is the stream shifted?).",
                    flag_values=fv)
  flags.DEFINE_integer("gate_warmup", None, "Gate: batches probed with both paths"
                       " (default: 256 images' worth for diversity_gain, 1280 for"
                       " confidence_gain, 640 for confidence_drop).", flag_values=fv)
  flags.DEFINE_float("gate_delta", None, "Gate: keep adapting iff the probe's score"
                     " exceeds this (default: 0.03 nats for diversity_gain, 0 for"
                     " confidence_gain, 0.05 for confidence_drop).", flag_values=fv)
  flags.DEFINE_float("gate_reference", None, "confidence_drop: the source's mean"
                     " top-1 confidence on clean held-out data (default: measured on"
                     " the clean split of generated corruptions).", flag_values=fv)
  flags.DEFINE_string("output_dir", None, "Where results.* go.", flag_values=fv,
                      required=True)
  return fv


def run(fv: flags.FlagValues, command: str) -> int:
  from forge_tflm.data import load_dataset
  from forge_tflm.evaluation import streams as st
  from forge_tflm.evaluation.protocol import EvalConfig
  from forge_tflm.evaluation.run import run_evaluation

  corruptions = fv.corruptions
  if corruptions == ["all"]:
    from forge_tflm.corruptions import CORRUPTIONS
    corruptions = list(CORRUPTIONS)
  config = EvalConfig(
      methods=tuple(fv.methods), batch_size=fv.batch_size, orderings=fv.orderings,
      ordering_seed=fv.seed, kernels=fv.kernels,
      gate=GateConfig(warmup_batches=fv.gate_warmup, delta=fv.gate_delta,
                      signal=fv.gate_signal, reference=fv.gate_reference),
      option_overrides=recalib_flag_values(fv))
  if not fv.artifact and not fv.keras_model:
    raise ValueError("give --artifact and/or --keras_model")
  if fv.keras_model:  # Loaded for the float methods; keep TensorFlow's import quiet.
    from forge_tflm.quiet import import_quietly
    import_quietly("tensorflow", "keras")
  limit = fv.limit or None
  clean = None
  if fv.corrupted_from == "generated":
    split = fv.split or ("val" if fv.dataset == "tiny_imagenet" else "test")
    clean = load_dataset(fv.dataset, split, fv.data_dir).random_subset(limit, fv.seed)
    streams = list(st.generated_streams(clean, corruptions, fv.severity, fv.seed,
                                        fv.include_clean))
    description = f"{clean.source}, generated corruptions, severity {fv.severity}"
  elif fv.corrupted_from == "cifar_c":
    if not fv.cifar_c_dir:
      raise ValueError("--corrupted_from=cifar_c needs --cifar_c_dir")
    streams = list(st.cifar_c_streams(fv.cifar_c_dir, corruptions, fv.severity, limit,
                                      fv.seed))
    description = f"{fv.cifar_c_dir}, severity {fv.severity}"
  else:
    streams = list(st.tfds_streams(corruptions, fv.severity, limit, fv.seed))
    description = f"tfds cifar10_corrupted, severity {fv.severity}"
  doc = run_evaluation(config, streams, artifact_path=fv.artifact,
                       keras_path=fv.keras_model, output_dir=fv.output_dir,
                       command=command, data_description=description,
                       clean_images=None if clean is None else clean.images)
  from forge_tflm.evaluation.report import to_markdown
  print(to_markdown(doc["results"], doc["gate"]))
  return 0
