"""Tests of the scripts in benchmarks/ (not a package: loaded from their files)."""

import contextlib
import importlib.util
import pathlib
import sys

BENCHMARKS = pathlib.Path(__file__).parents[2] / "benchmarks"


@contextlib.contextmanager
def benchmark_script(name: str):
  """benchmarks/<name>.py as a module, registered under its name while in use (its
  dataclasses resolve their module by name)."""
  spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  try:
    spec.loader.exec_module(module)
    yield module
  finally:
    del sys.modules[name]
