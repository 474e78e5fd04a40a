"""The `forge_tflm` command line: subcommand listing, errors, exit codes."""

import os
import shutil
import subprocess
import sys

import pytest

from forge_tflm.cli import main as cli


def test_help_lists_existing_subcommands(capsys):
  assert cli.main(["forge_tflm", "--help"]) == 0
  out = capsys.readouterr().out
  for name in cli.SUBCOMMANDS:
    assert name in out


def test_no_subcommand_is_a_usage_error(capsys):
  assert cli.main(["forge_tflm"]) == 2
  assert "usage" in capsys.readouterr().out


def test_unknown_subcommand(capsys):
  assert cli.main(["forge_tflm", "deploy"]) == 2
  assert "unknown subcommand 'deploy'" in capsys.readouterr().err


def test_every_listed_subcommand_has_help(capsys):
  for name in cli.SUBCOMMANDS:
    assert cli.main(["forge_tflm", name, "--help"]) == 0
    assert f"forge_tflm {name}" in capsys.readouterr().out


def test_help_names_the_int8_input_and_lists_required_flags_first(capsys):
  assert cli.main(["forge_tflm", "--help"]) == 0
  convert_line = next(line for line in capsys.readouterr().out.splitlines()
                      if line.strip().startswith("convert"))
  assert "int8 .tflite" in convert_line
  assert cli.main(["forge_tflm", "convert", "--help"]) == 0
  out = capsys.readouterr().out
  required, optional = out.split("\nrequired:\n")[1].split("\noptional:\n")
  assert "--model:" in required and "--output:" in required
  assert "--data_dir:" not in required and "--data_dir:" in optional
  assert cli.main(["forge_tflm", "run-firmware", "--help"]) == 0
  out = capsys.readouterr().out
  assert out.startswith("usage: forge_tflm run-firmware ARTIFACT [--flags]")
  assert "--artifact:" in out.split("optional:")[0]


def test_bad_flag_is_a_one_line_usage_error(capsys):
  assert cli.main(["forge_tflm", "train", "--no_such_flag=1"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("forge_tflm train:") and "\n" not in err


def test_console_script_is_installed():
  # The script of this interpreter's environment first (a venv may not be on PATH).
  exe = (shutil.which("forge_tflm", path=os.path.dirname(sys.executable))
         or shutil.which("forge_tflm"))
  if exe is None:
    pytest.fail("forge_tflm is not on PATH: install the package (README set-up command)")
  result = subprocess.run([exe, "--help"], capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr
  assert "train" in result.stdout


def test_module_entry_point():
  result = subprocess.run([sys.executable, "-m", "forge_tflm.cli.main", "--help"],
                          capture_output=True, text=True, check=False)
  assert result.returncode == 0 and "subcommands" in result.stdout


def test_subcommand_help_lists_its_flags_under_python_m():
  # absl's main_module_help() showed only the flags of the module run as __main__
  # (forge_tflm.cli.main's --verbose), hiding every subcommand flag.
  result = subprocess.run([sys.executable, "-m", "forge_tflm.cli.main", "convert",
                           "--help"], capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr
  for flag in ("--model", "--window", "--momentum", "--eps", "--variance", "verbose"):
    assert flag in result.stdout, flag
