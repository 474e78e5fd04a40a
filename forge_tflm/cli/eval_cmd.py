"""Stream corrupted images through the deployable artifact and baselines.

Each corruption is one stream, shuffled (K orderings give mean +- std); int8
methods (source, forge, forge-gated, scale-adapt) run the converted .tflite in
the LiteRT interpreter with FORGE nodes in the C core, float methods
(source-fp32, bn-adapt, tent) run the Keras model. Writes results.json (with the
command and artifact hash), results.csv, results.md and results.png to
--output_dir, and each finished stream's results to --output_dir/streams/ at once, so an
interrupted run keeps them and the same command with --resume continues it.
Every flag and path is checked before any data is loaded.
"""

from __future__ import annotations

import os

from absl import flags

from forge_tflm.evaluation import field_streams
from forge_tflm.evaluation.gate import SETTINGS, GateConfig
from forge_tflm.evaluation.protocol import ALL_METHODS
from forge_tflm.evaluation.report import HURT_POINTS
from forge_tflm.cli.recalib_flags import define_recalib_flags, recalib_flag_values
from forge_tflm.cli.sweep_flags import define_sweep_flags, executor_from_flags


def define_flags(fv: flags.FlagValues) -> flags.FlagValues:
  """The command's flags, essential ones first (one declaration per flag: a list, not
  logic, so it runs past ~60 lines)."""
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
  flags.DEFINE_integer("severity", 5, "Severity 1-5.", lower_bound=1, upper_bound=5,
                       flag_values=fv)
  flags.DEFINE_bool("include_clean", False, "Also evaluate the clean stream.",
                    flag_values=fv)
  flags.DEFINE_integer("limit", 0, "Use a random subset of N images per stream (0: all).",
                       lower_bound=0, flag_values=fv)
  flags.DEFINE_integer("batch_size", 64, "Batch size (1 allowed). The FORGE op takes at"
                       " most N*H*W <= 2^22 (4,194,304) elements per channel per call, so"
                       " the largest batch is 2^22 / (H*W of the largest FORGE site), e.g."
                       " 4096 when it is 32x32 (ResNet-20 on CIFAR); checked before the"
                       " run.", lower_bound=1,
                       flag_values=fv)
  flags.DEFINE_enum("protocol", "reset_each_shift", list(field_streams.PROTOCOLS),
                    "How the streams follow one another: reset_each_shift (each"
                    " corruption its own stream, state reset), continual (all chosen"
                    " corruptions back to back, domain order seeded, no reset), gradual"
                    " (per corruption severities 1..5..1 without reset; ignores"
                    " --severity), mixed (interleaved image by image). Results are"
                    " also reported per domain.", flag_values=fv)
  flags.DEFINE_enum("label_order", "shuffled", list(field_streams.LABEL_ORDERS),
                    "Labels inside a domain: shuffled (i.i.d.), dirichlet (label-"
                    "correlated: class proportions per batch-sized slot from"
                    " Dirichlet(--dirichlet_alpha)) or sorted (by class).", flag_values=fv)
  flags.DEFINE_float("dirichlet_alpha", 0.1, "Concentration of --label_order=dirichlet"
                     " (0.1, 0.01: the benchmarks' settings; smaller = more correlated).",
                     lower_bound=1e-6, flag_values=fv)
  # Every ordering is a whole stream per method: 1,000 of the whole split is days.
  flags.DEFINE_integer("orderings", 1, "Shuffled orderings per stream (K, at most 1000).",
                       lower_bound=1, upper_bound=1000, flag_values=fv)
  flags.DEFINE_integer("seed", 0, "Seed of orderings, corruptions and subsets.",
                       lower_bound=0, upper_bound=2**32 - 1, flag_values=fv)
  flags.DEFINE_float("hurt_threshold", HURT_POINTS, "A method hurts a stream when its mean"
                     " accuracy is more than this many points under its source's (the"
                     " results' 'hurt' lists and the docs use this one definition).",
                     lower_bound=0.0, flag_values=fv)
  flags.DEFINE_enum("kernels", "optimized", ["optimized", "reference"],
                    "reference = device numerics (BUILTIN_REF); optimized = fast.",
                    flag_values=fv)
  define_recalib_flags(fv, prefix="Override the artifact's FORGE option: ")
  define_gate_flags(fv)
  flags.DEFINE_string("output_dir", None, "Where results.* go; each finished stream's"
                      " results go to <output_dir>/streams/ as soon as it is done.",
                      flag_values=fv, required=True)
  flags.DEFINE_bool("resume", False, "Continue the interrupted evaluation in"
                    " --output_dir: the streams it finished are loaded, only the others"
                    " are evaluated (results.json lists which). Refused if that run had"
                    " another configuration (artifact or float-model hash, methods,"
                    " flags, data). With nothing to resume it starts afresh, so one"
                    " command line serves both. Without --resume an unfinished run in"
                    " --output_dir is refused rather than overwritten.", flag_values=fv)
  # Inline by default: per-image progress, and small runs do not pay for spawning.
  define_sweep_flags(fv, "stream", default="inline")
  return fv


def _flag_error(flag: str, value, why: str) -> ValueError:
  shown = ",".join(value) if isinstance(value, list) else value
  return ValueError(f"--{flag}={shown}: {why}")


def define_gate_flags(fv: flags.FlagValues) -> None:
  """--gate_<name> for each setting of the controller (forge_controller_settings.h)."""
  for s in SETTINGS:
    define = flags.DEFINE_float if s.kind == "f64" else flags.DEFINE_integer
    define(f"gate_{s.name}", None, f"Gate: {s.help} (default: {s.default:g};"
           " docs/design/field-robustness.md).", flag_values=fv)


def _gate_flags_given(fv: flags.FlagValues) -> list[str]:
  return [f"--gate_{s.name}={fv[f'gate_{s.name}'].value}" for s in SETTINGS
          if fv[f"gate_{s.name}"].value is not None]


def gate_config(fv: flags.FlagValues) -> GateConfig:
  return GateConfig(**{s.name: fv[f"gate_{s.name}"].value for s in SETTINGS})


def _check_flags(fv: flags.FlagValues) -> list[str]:
  """Every flag checked before any work; returns the corruption names."""
  _check_methods(fv)
  corruptions = _check_corruptions(fv)
  _check_settings(fv)
  return corruptions


def _check_methods(fv: flags.FlagValues) -> None:
  from forge_tflm.evaluation.protocol import FP32_NAMES, INT8_NAMES

  methods = fv.methods
  if not methods:
    raise _flag_error("methods", methods, "no method given; known: " + ", ".join(ALL_METHODS))
  unknown = [m for m in methods if m not in ALL_METHODS]
  if unknown:
    raise _flag_error("methods", methods, f"unknown method(s) {', '.join(unknown)};"
                      f" known: {', '.join(ALL_METHODS)}")
  if len(set(methods)) != len(methods):
    raise _flag_error("methods", methods, "a method is listed twice")
  if not fv.artifact and not fv.keras_model:
    raise ValueError("give --artifact and/or --keras_model")
  int8 = [m for m in methods if m in INT8_NAMES]
  fp32 = [m for m in methods if m in FP32_NAMES]
  if int8 and not fv.artifact:
    raise _flag_error("methods", methods, f"{', '.join(int8)} run the int8 model: give"
                      " --artifact")
  if fp32 and not fv.keras_model:
    raise _flag_error("methods", methods, f"{', '.join(fp32)} run the float model: give"
                      " --keras_model")


def _check_corruptions(fv: flags.FlagValues) -> list[str]:
  """The corruption names (`all` expanded), each one the chosen source has."""
  from forge_tflm.corruptions import CORRUPTIONS

  corruptions = list(fv.corruptions)
  if not corruptions or any(not c for c in corruptions):
    raise _flag_error("corruptions", corruptions, "empty corruption name; give names or"
                      " 'all'")
  if "all" in corruptions:
    if corruptions != ["all"]:
      raise _flag_error("corruptions", corruptions, "'all' cannot be combined with names")
    corruptions = list(CORRUPTIONS)
  if len(set(corruptions)) != len(corruptions):
    raise _flag_error("corruptions", corruptions, "a corruption is listed twice")
  if fv.corrupted_from == "cifar_c":
    if not fv.cifar_c_dir:
      raise ValueError("--corrupted_from=cifar_c needs --cifar_c_dir")
    if not os.path.isdir(fv.cifar_c_dir):
      raise _flag_error("cifar_c_dir", fv.cifar_c_dir, "not a directory")
    from forge_tflm.data import list_corruptions
    known = list_corruptions(fv.cifar_c_dir)
    missing = [c for c in corruptions if c not in known]
    if missing:
      raise _flag_error("corruptions", fv.corruptions,
                        f"no {', '.join(c + '.npy' for c in missing)} in"
                        f" --cifar_c_dir={fv.cifar_c_dir} (it has:"
                        f" {', '.join(known) or 'no <corruption>.npy'})")
  else:
    if fv.cifar_c_dir:
      raise _flag_error("cifar_c_dir", fv.cifar_c_dir, "only used with"
                        " --corrupted_from=cifar_c")
    unknown = [c for c in corruptions if c not in CORRUPTIONS]
    if unknown:
      raise _flag_error("corruptions", fv.corruptions,
                        f"unknown corruption(s) {', '.join(unknown)}; known:"
                        f" {', '.join(CORRUPTIONS)}")
  if fv.include_clean and fv.corrupted_from != "generated":
    raise ValueError("--include_clean needs --corrupted_from=generated (the clean split"
                     " is the stream the corruptions are generated from)")
  return corruptions


def _check_settings(fv: flags.FlagValues) -> None:
  """The gate's and the op's settings, as the run would build them."""
  try:
    gate_config(fv)
  except ValueError as e:
    raise ValueError(f"{' '.join(_gate_flags_given(fv))}: {e}") from None
  overrides = recalib_flag_values(fv)
  if overrides:
    from forge_tflm.ops import RecalibOptions
    try:
      RecalibOptions(window=1).replace(**overrides)
    except ValueError as e:
      given = " ".join(f"--{k}={v}" for k, v in overrides.items())
      raise ValueError(f"{given}: {e}") from e


def _check_paths(fv: flags.FlagValues, methods):
  """Inputs exist and are what they should be; --output_dir can take files; the
  artifact has the FORGE ops the methods need and takes the batch size. Returns the
  loaded Artifact (None without --artifact)."""
  from forge_tflm.evaluation import checks

  if fv.data_dir and not os.path.exists(fv.data_dir):
    raise _flag_error("data_dir", fv.data_dir, "does not exist")
  if fv.keras_model and any(m in ("source-fp32", "bn-adapt", "tent") for m in methods):
    checks.check_input_file(fv.keras_model, "--keras_model")
  checks.check_output_dir(fv.output_dir, "--output_dir")
  if not fv.artifact:
    return None
  checks.check_input_file(fv.artifact, "--artifact")
  artifact = checks.load_artifact(fv.artifact)
  sites = checks.forge_sites(artifact)
  needing = [m for m in methods if m in checks.FORGE_METHODS]
  if needing and not sites:
    raise ValueError(
        f"--artifact={fv.artifact} has no FORGE_RECALIB ops (a plain int8 model?):"
        f" method(s) {', '.join(needing)} adapt at FORGE sites; evaluate the model"
        " forge_tflm convert writes to --output, or use --methods=source")
  limit = checks.max_batch_size(sites)
  if limit is not None and fv.batch_size > limit and any(
      m in methods for m in checks.OP_METHODS):
    big = max(sites, key=lambda s: s.pixels)
    raise _flag_error(
        "batch_size", fv.batch_size,
        f"over the FORGE op's per-call limit of N*H*W <= {checks.max_m()} (2^22) elements"
        f" per channel: site {big.name} of {fv.artifact} has H*W = {big.pixels}, so"
        f" --batch_size must be <= {limit}")
  return artifact


def _check_images(images, what: str, artifact, fv: flags.FlagValues) -> None:
  """The images fit the model's input (checked before corrupting or evaluating)."""
  from forge_tflm.evaluation import checks

  if artifact is None:
    return
  want = checks.input_shape(artifact)
  if want is not None and tuple(images.shape[1:]) != want:
    raise ValueError(f"{what}: images are {'x'.join(map(str, images.shape[1:]))}, but"
                     f" --artifact={fv.artifact} takes {'x'.join(map(str, want))}")


def run(fv: flags.FlagValues, command: str) -> int:
  corruptions = _check_flags(fv)
  artifact = _check_paths(fv, fv.methods)
  from forge_tflm.data import load_dataset
  from forge_tflm.evaluation import streams as st
  from forge_tflm.evaluation.protocol import EvalConfig
  from forge_tflm.evaluation.run import run_evaluation

  config = EvalConfig(
      methods=tuple(fv.methods), batch_size=fv.batch_size, orderings=fv.orderings,
      ordering_seed=fv.seed, kernels=fv.kernels,
      gate=gate_config(fv),
      option_overrides=recalib_flag_values(fv))
  if fv.keras_model:  # Loaded for the float methods; keep TensorFlow's import quiet.
    from forge_tflm.quiet import import_quietly
    import_quietly("tensorflow", "keras")
  limit = fv.limit or None
  clean = None
  if fv.corrupted_from == "generated":
    split = fv.split or ("val" if fv.dataset == "tiny_imagenet" else "test")
    clean = load_dataset(fv.dataset, split, fv.data_dir).random_subset(limit, fv.seed)
    where = f"--data_dir={fv.data_dir}" if fv.data_dir else f"--dataset={fv.dataset}"
    _check_images(clean.images, f"{where} ({clean.source})", artifact, fv)
    _check_corruptible(clean, where)
    description = f"{clean.source}, generated corruptions, severity {fv.severity}"
  elif fv.corrupted_from == "cifar_c":
    description = f"{fv.cifar_c_dir}, severity {fv.severity}"
  else:
    description = f"tfds cifar10_corrupted, severity {fv.severity}"

  def at(severity, include_clean=False):
    return list(st.corruption_streams(fv.corrupted_from, corruptions, severity, clean=clean,
                                      cifar_c_dir=fv.cifar_c_dir, limit=limit,
                                      seed=fv.seed, include_clean=include_clean))

  streams = at(fv.severity, fv.include_clean)
  if fv.corrupted_from != "generated":
    for s in streams:
      _check_images(s.images, f"stream {s.name}", artifact, fv)
  label_order = field_streams.LabelOrder(
      fv.label_order, fv.dirichlet_alpha if fv.label_order == "dirichlet" else None,
      fv.batch_size)
  gradual_sources = None
  if fv.protocol == "gradual":
    gradual_sources = {}
    for severity in sorted(set(field_streams.GRADUAL_SEVERITIES)):
      for stream in at(severity):
        gradual_sources.setdefault(stream.name, {})[severity] = stream
    description = description.rsplit(",", 1)[0] + ", severities 1-5-1"
  streams = field_streams.build(fv.protocol, streams, label_order, gradual_sources,
                                fv.seed)
  if fv.protocol != "reset_each_shift" or fv.label_order != "shuffled":
    description += f"; protocol {fv.protocol}, labels {label_order.spec}"
  doc = run_evaluation(config, streams, artifact_path=fv.artifact,
                       keras_path=fv.keras_model, output_dir=fv.output_dir,
                       command=command, data_description=description,
                       resume=fv.resume, executor=executor_from_flags(fv),
                       hurt_threshold=fv.hurt_threshold)
  from forge_tflm.evaluation.report import to_markdown
  print(to_markdown(doc["results"], doc["gate"], doc.get("gate_periodic")))
  return 0


def _check_corruptible(clean, where: str) -> None:
  """The generators have parameters for this image size (else: say which flags)."""
  from forge_tflm.corruptions import PARAMETER_SETS

  h, w = clean.images.shape[1:3]
  sizes = {name: t["image_size"] for name, t in PARAMETER_SETS.items()}
  if (h, w) not in {(v, v) for v in sizes.values()}:
    known = ", ".join(f"{v}x{v} ({n})" for n, v in sizes.items())
    raise ValueError(f"{where}: images are {h}x{w}, but the generated corruptions"
                     f" (--corrupted_from=generated) have parameters only for {known};"
                     " use --corrupted_from=cifar_c or tfds for other sizes")
