"""Repository invariants: the README's test command is what CI runs; pins are exact."""

import os
import re
import subprocess

import pytest

from tests.conftest import REPO_ROOT


def _read(*parts):
  with open(os.path.join(REPO_ROOT, *parts)) as f:
    return f.read()


def _readme_commands():
  return re.findall(r"```sh\n(.*?)\n```", _read("README.md"), re.S)


def test_ci_runs_exactly_the_readme_test_command():
  commands = _readme_commands()
  test_cmd = next(c for c in commands if "pytest" in c)
  ci_lines = [l for l in _read(".ci", "run").splitlines()
              if l.strip() and not l.startswith("#")
              and not l.startswith(("set ", "cd "))]
  assert ci_lines == [test_cmd]


def test_requirements_are_exact_pins():
  for name in ("requirements.txt", "requirements-nodeps.txt"):
    for line in _read(name).splitlines():
      line = line.split("#")[0].strip()
      if line:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][0-9A-Za-z.]*", line), line
  pins = dict(l.split("==") for l in _read("requirements.txt").splitlines()
              if "==" in l and not l.startswith("#"))
  assert pins["tensorflow"] == "2.21.0" and pins["ai-edge-litert"] == "2.3.0"


# The product card's layout, and what else the top level may hold (a new top-level
# room is a decision, not an accident).
PRODUCT_CARD = {"forge_tflm", "converter", "custom_ops", "esp32s3_app", "tests", "WORKSPACE",
                "requirements.txt"}
ALSO_TOP_LEVEL = {".ci", ".gitignore", "README.md", "pyproject.toml", "setup.py",
                  "requirements-nodeps.txt", "benchmarks", "docs", "models", "results"}


def test_product_layout_exists_and_the_top_level_holds_nothing_else():
  for path in sorted(PRODUCT_CARD | {"pyproject.toml", "README.md"}):
    assert os.path.exists(os.path.join(REPO_ROOT, path)), path
  tracked = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True,
                           text=True)
  if tracked.returncode != 0:
    pytest.skip("not a git checkout")
  top = {line.split("/")[0] for line in tracked.stdout.splitlines()}
  assert top <= PRODUCT_CARD | ALSO_TOP_LEVEL, sorted(top - PRODUCT_CARD - ALSO_TOP_LEVEL)


def test_every_package_is_listed_in_pyproject():
  """The package list is explicit (converter/ maps to forge_tflm.converter)."""
  import tomllib
  with open(os.path.join(REPO_ROOT, "pyproject.toml"), "rb") as f:
    listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
  found = {"forge_tflm.converter"}
  for dirpath, _, files in os.walk(os.path.join(REPO_ROOT, "forge_tflm")):
    if "__init__.py" in files and "__pycache__" not in dirpath:
      rel = os.path.relpath(dirpath, REPO_ROOT)
      found.add(rel.replace(os.sep, "."))
  assert found == listed


def test_public_api_resolves():
  import forge_tflm
  for name in forge_tflm.__all__:
    assert getattr(forge_tflm, name) is not None, name
