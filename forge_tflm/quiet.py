"""Keeps TensorFlow's and LiteRT's internal logging off a command's output.

Commands print their own progress and results; what TensorFlow logs while it loads,
saves and converts a model (SavedModel loader, MLIR passes, CUDA probing, its
Python INFO lines) is noise to a user and shows only with `--verbose`.
`hide_framework_logs()` must run before TensorFlow is imported (its C++ logging reads
TF_CPP_MIN_LOG_LEVEL once); `native_output_hidden()` swallows what C++ code writes
straight to the stdout/stderr file descriptors during a call, and replays it if the
call fails, so an error never loses its context.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from typing import Iterator

_HIDDEN = False


def hide_framework_logs(hidden: bool = True) -> None:
  """Silences TensorFlow's C++ and Python logging for this process (or, with
  hidden=False, lets native output through again; the environment stays)."""
  global _HIDDEN
  _HIDDEN = hidden
  if not hidden:
    logging.getLogger("tensorflow").setLevel(logging.NOTSET)
    return
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # C++: errors too (we report).
  os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  warnings.filterwarnings("ignore", module=r"tensorflow(\..*)?")
  warnings.filterwarnings("ignore", module=r"keras(\..*)?")


@contextlib.contextmanager
def native_output_hidden() -> Iterator[None]:
  """While hidden: fds 1 and 2 go to a temporary file during the block."""
  if not _HIDDEN:
    yield
    return
  sys.stdout.flush()
  sys.stderr.flush()
  saved = [os.dup(1), os.dup(2)]
  with tempfile.TemporaryFile() as sink:
    os.dup2(sink.fileno(), 1)
    os.dup2(sink.fileno(), 2)
    try:
      yield
    except BaseException:
      _restore(saved)
      sink.seek(0)
      sys.stderr.write(sink.read().decode(errors="replace"))
      raise
    else:
      _restore(saved)


def _restore(saved: list[int]) -> None:
  sys.stdout.flush()
  sys.stderr.flush()
  os.dup2(saved[0], 1)
  os.dup2(saved[1], 2)
  for fd in saved:
    os.close(fd)
  saved.clear()


def import_quietly(*modules: str) -> None:
  """Imports `modules` with their import-time native logging hidden (TensorFlow's
  C++ logs CPU/CUDA probing before TF_CPP_MIN_LOG_LEVEL is read by absl)."""
  import importlib
  with native_output_hidden():
    for name in modules:
      importlib.import_module(name)
