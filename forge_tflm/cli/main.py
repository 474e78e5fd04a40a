"""`forge_tflm <subcommand> [--flags]`: one absl-flags CLI, one module per subcommand.

Each subcommand module defines its flags in its own `flags.FlagValues` (so
`forge_tflm train --help` lists only the training flags) and a `run(flag_values)`
that calls library functions and returns an exit status. `run` also gets the
exact command line, which outputs record.
"""

from __future__ import annotations

import importlib
import shlex
import sys

from absl import flags, logging

from forge_tflm.quiet import hide_framework_logs

# name -> (module, one-line summary). Only subcommands that exist are listed.
SUBCOMMANDS = {
    "convert": ("forge_tflm.cli.convert_cmd",
                "float Keras / ONNX model or the int8 .tflite you ship -> full-int8"
                " .tflite with FORGE_RECALIB + manifest"),
    "eval": ("forge_tflm.cli.eval_cmd",
             "stream corrupted images through the artifact and baselines; JSON/CSV/MD/PNG"),
    "select": ("forge_tflm.cli.select_cmd",
               "rank FORGE sites on held-out corruptions; write a sites file for"
               " convert --sites=@FILE"),
    "experiment": ("forge_tflm.cli.experiment_cmd",
                   "run one of the paper's experiments; results/NAME/ (JSON, MD, PNG)"),
    "report": ("forge_tflm.cli.report_cmd",
               "gather the experiments' results into results/REPORT.md beside the paper's"),
    "train": ("forge_tflm.cli.train_cmd", "train a bundled Keras model on CIFAR/Tiny-ImageNet"),
    "export-firmware": ("forge_tflm.cli.export_firmware_cmd",
                        "model, images, arena size and expected outputs for a firmware"
                        " build (esp32s3_app)"),
    "run-firmware": ("forge_tflm.cli.run_firmware_cmd",
                     "export, build and run a firmware under an emulator, then verify it"
                     " (one command)"),
    "verify-device": ("forge_tflm.cli.verify_device_cmd",
                      "a device log (+ PPK2 capture) against the exported expected outputs"),
}


class UsageError(Exception):
  """Bad command line: printed as one line, exit status 2."""


def _usage() -> str:
  width = max(len(n) for n in SUBCOMMANDS)
  lines = ["usage: forge_tflm <subcommand> [--flags]   (forge_tflm <subcommand> --help)",
           "", "subcommands:"]
  lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in SUBCOMMANDS.items()]
  return "\n".join(lines)


def _is_required(flag) -> bool:
  # absl keeps `required=True` only as this validator on the flag.
  return any(getattr(v, "message", "").endswith("must have a value other than None.")
             for v in flag.validators)


def _help(name: str, module, flag_values: flags.FlagValues) -> str:
  """The subcommand's doc, then its required flags, then the others (alphabetical)."""
  positional = getattr(module, "POSITIONAL", None)
  every = sorted({id(f): f for f in flag_values._flags().values()}.values(),
                 key=lambda f: f.name)
  required = [f for f in every if f.name == positional or _is_required(f)]
  usage = f"forge_tflm {name}" + (f" {positional.upper()}" if positional else "")
  lines = [f"usage: {usage} [--flags]", "", module.__doc__.strip(), ""]
  if required:
    lines.append("required" + (f" ({positional.upper()} may be given as --{positional})"
                               if positional else "") + ":")
    flag_values._render_flag_list(required, lines)
    lines.append("")
  lines.append("optional:")
  flag_values._render_flag_list([f for f in every if f not in required], lines)
  return "\n".join(lines)


def _parse(flag_values: flags.FlagValues, argv: list[str], positional: str | None) -> None:
  """Parses flags; a subcommand with a `POSITIONAL` flag name also takes that flag's
  value as its one positional argument (`forge_tflm verify-device LOG`)."""
  try:
    rest = flag_values(argv)[1:]
  except flags.Error as e:
    raise UsageError(str(e)) from e
  if rest and positional and len(rest) == 1 and flag_values[positional].value is None:
    flag_values[positional].value = rest[0]
  elif rest:
    raise UsageError(f"unexpected argument(s): {' '.join(rest)}")


def main(argv: list[str] | None = None) -> int:
  argv = list(sys.argv if argv is None else argv)
  if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
    print(_usage())
    return 0 if len(argv) >= 2 else 2
  name = argv[1]
  if name not in SUBCOMMANDS:
    print(f"forge_tflm: unknown subcommand {name!r}\n\n{_usage()}", file=sys.stderr)
    return 2
  module = importlib.import_module(SUBCOMMANDS[name][0])
  flag_values = module.define_flags(flags.FlagValues())
  flags.DEFINE_bool("verbose", False, "Also show TensorFlow's and LiteRT's internal"
                    " logging (hidden by default).", flag_values=flag_values)
  sub_argv = [f"forge_tflm {name}"] + argv[2:]
  if any(a in ("-h", "--help", "--helpfull") for a in argv[2:]):
    print(_help(name, module, flag_values))
    return 0
  try:
    _parse(flag_values, sub_argv, getattr(module, "POSITIONAL", None))
    hide_framework_logs(not flag_values.verbose)  # Before any TensorFlow import.
    flags.FLAGS.mark_as_parsed()  # Our flags live in flag_values; absl logs anyway.
    logging.use_absl_handler()
    logging.set_verbosity(logging.INFO)
    command = "forge_tflm " + " ".join(shlex.quote(a) for a in argv[1:])
    return int(module.run(flag_values, command) or 0)
  except UsageError as e:
    print(f"forge_tflm {name}: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print(f"forge_tflm {name}: interrupted", file=sys.stderr)
    return 130
  except (ValueError, OSError) as e:
    # Expected failures (bad input, missing files) get one line, not a traceback.
    print(f"forge_tflm {name}: error: {e}", file=sys.stderr)
    return 1


def entry_point() -> None:
  sys.exit(main())


if __name__ == "__main__":
  entry_point()
