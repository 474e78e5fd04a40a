"""Imports go one way: lower layers never import the layers built on them."""

import ast
import glob
import os

from tests.conftest import REPO_ROOT

# module (or package folder; a module pattern such as model_check*.py covers each module
# it matches) -> package prefixes it must not import.
FORBIDDEN = {
    "forge_tflm/model_check*.py": ("forge_tflm.artifact",),
    "forge_tflm/errors.py": ("forge_tflm",),
    "forge_tflm/evaluation": ("forge_tflm.deploy", "forge_tflm.experiments", "forge_tflm.cli"),
    "forge_tflm/runtime": ("forge_tflm.deploy", "forge_tflm.evaluation", "forge_tflm.experiments"),
    # What the tests and the benchmarks share lives in the package, not in tests/.
    "forge_tflm/testing": ("tests",),
    "benchmarks": ("tests",),
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
    files = glob.glob(full if full.endswith(".py") else os.path.join(full, "*.py"))
    assert files, f"FORBIDDEN names {where}, which matches no module"
    for path in files:
      for name in _imports(path):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
          bad.append(f"{os.path.relpath(path, REPO_ROOT)} imports {name}")
  assert not bad, "\n".join(bad)


def test_only_the_tests_and_benchmarks_import_forge_tflm_testing():
  """forge_tflm.testing (fuzz generators, oracles, reference models) serves the tests
  and the benchmarks; no other module of the package imports it."""
  testing = os.path.join(REPO_ROOT, "forge_tflm", "testing")
  bad = []
  for top in ("forge_tflm", "converter"):  # converter/ ships as forge_tflm.converter.
    for path in sorted(glob.glob(os.path.join(REPO_ROOT, top, "**", "*.py"),
                                 recursive=True)):
      if os.path.commonpath([path, testing]) == testing:
        continue
      for name in _imports(path):
        if name == "forge_tflm.testing" or name.startswith("forge_tflm.testing."):
          bad.append(f"{os.path.relpath(path, REPO_ROOT)} imports {name}")
  assert not bad, "\n".join(bad)


def _private(name: str) -> bool:
  return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_uses(source: str):
  """(line, text) for each use of an underscore name of forge_tflm in `source`: imported
  (`from forge_tflm.x import _y`, `import forge_tflm._x`), read or patched through a name
  bound to a forge_tflm import (`x._y`, setattr/getattr(x, "_y")), or named in a dotted
  string ("forge_tflm.x._y"). Python code in string constants (a child process's script)
  is scanned too. Private attributes of objects a test builds are not seen."""
  tree = ast.parse(source)
  bound = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for a in node.names:
        if a.name.split(".")[0] == "forge_tflm":
          if any(_private(p) for p in a.name.split(".")):
            yield node.lineno, f"import {a.name}"
          bound.add(a.asname or "forge_tflm")
    elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
          and node.module.split(".")[0] == "forge_tflm"):
      for a in node.names:
        if any(_private(p) for p in node.module.split(".") + [a.name]):
          yield node.lineno, f"from {node.module} import {a.name}"
        bound.add(a.asname or a.name)

  def root(expr):
    while isinstance(expr, ast.Attribute):
      expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None

  for node in ast.walk(tree):
    if isinstance(node, ast.Attribute) and _private(node.attr) and root(node) in bound:
      yield node.lineno, ast.unparse(node)
    elif isinstance(node, ast.Call) and len(node.args) >= 2:
      name = node.args[1]
      if (ast.unparse(node.func).split(".")[-1] in ("setattr", "getattr", "delattr",
                                                     "hasattr")
          and root(node.args[0]) in bound and isinstance(name, ast.Constant)
          and isinstance(name.value, str) and _private(name.value)):
        yield node.lineno, f"{ast.unparse(node.func)}({ast.unparse(node.args[0])}, {name.value!r})"
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
      text = node.value
      if text.startswith("forge_tflm.") and " " not in text:
        if any(_private(p) for p in text.split(".")):
          yield node.lineno, repr(text)
      elif "forge_tflm" in text and "import" in text:
        try:
          inner = list(_private_uses(text))
        except SyntaxError:
          continue
        yield from ((node.lineno + line - 1, what) for line, what in inner)


def test_the_tests_use_no_private_name_of_the_package():
  """Tests reach forge_tflm through its public names only (issue 38): a private name
  the tests need is made public, or the test goes through the public API."""
  bad = []
  for path in sorted(glob.glob(os.path.join(REPO_ROOT, "tests", "**", "*.py"),
                               recursive=True)):
    if os.path.samefile(path, __file__):  # Its examples of what the check finds.
      continue
    with open(path) as f:
      source = f.read()
    bad += [f"{os.path.relpath(path, REPO_ROOT)}:{line}: {what}"
            for line, what in sorted(set(_private_uses(source)))]
  assert not bad, "private names of forge_tflm used by tests:\n" + "\n".join(bad)


def test_the_private_name_check_sees_each_form():
  found = sorted(what for _, what in _private_uses('''
import forge_tflm.ops._core as c
from forge_tflm.ops import _core, options, __version__
from forge_tflm import fileio as f
from tests.x import _helper
options._LIMIT
options.core().__doc__
f.public._inner
mp.setattr(f, "_write", None)
mp.setattr("forge_tflm.fileio._write", None)
script = """
from forge_tflm import fileio
fileio._write_file = None
"""
'''))
  assert found == sorted([
      "import forge_tflm.ops._core", "from forge_tflm.ops import _core", "options._LIMIT",
      "f.public._inner", "mp.setattr(f, '_write')", "'forge_tflm.fileio._write'",
      "fileio._write_file"]), found
