"""Imports go one way: lower layers never import the layers built on them."""

import ast
import glob
import os

from tests.conftest import REPO_ROOT

# module (or package folder) -> package prefixes it must not import.
FORBIDDEN = {
    "forge_tflm/model_check.py": ("forge_tflm.artifact",),
    "forge_tflm/errors.py": ("forge_tflm",),
    "forge_tflm/evaluation": ("forge_tflm.deploy", "forge_tflm.experiments", "forge_tflm.cli"),
    "forge_tflm/runtime": ("forge_tflm.deploy", "forge_tflm.evaluation", "forge_tflm.experiments"),
}


def _imports(path):
  tree = ast.parse(open(path).read())
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      yield from (a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      yield node.module
      yield from (f"{node.module}.{a.name}" for a in node.names)


def test_imports_go_one_way():
  bad = []
  for where, prefixes in FORBIDDEN.items():
    full = os.path.join(REPO_ROOT, where)
    files = [full] if full.endswith(".py") else glob.glob(os.path.join(full, "*.py"))
    for path in files:
      for name in _imports(path):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
          bad.append(f"{os.path.relpath(path, REPO_ROOT)} imports {name}")
  assert not bad, "\n".join(bad)
