"""The package's public API: every export resolves, names never collide with modules."""

import importlib
import pkgutil
import subprocess
import sys

import forge_tflm


def test_every_export_resolves():
  for name in forge_tflm.__all__:
    assert getattr(forge_tflm, name) is not None, name


def test_no_export_shares_a_name_with_a_subpackage_or_module():
  # `import forge_tflm.x` binds forge_tflm.x to the module, so an export named x
  # would change meaning after the first import.
  modules = {m.name for m in pkgutil.iter_modules(forge_tflm.__path__)}
  assert not modules & set(forge_tflm.__all__)


def test_evaluate_is_the_same_function_on_every_access():
  # In a fresh process, as in the issue: the first access used to import the
  # subpackage of the same name, which then shadowed the function.
  code = ("import forge_tflm as f; a = f.evaluate; b = f.evaluate; "
          "import forge_tflm.evaluation; c = f.evaluate; "
          "assert a is b is c and callable(a), (a, b, c)")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
  assert r.returncode == 0, r.stderr


def test_errors_are_exported_and_are_value_errors():
  assert issubclass(forge_tflm.ConversionError, ValueError)
  assert issubclass(forge_tflm.ArtifactError, ValueError)
  assert importlib.import_module("forge_tflm.converter.sites").ConversionError is \
      forge_tflm.ConversionError
