"""Atomic file writes (readers never see a half-written file, a failure leaves
none) and file hashes.

Every writer in the project (dataset and corruption caches, training
checkpoints, converter outputs, evaluation reports) goes through here.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str, suffix: str = ".tmp") -> Iterator[str]:
  """Yields a temporary path beside `path`; renames it onto `path` on success.

  `suffix` lets libraries that insist on an extension (np.save, Keras) write it.
  """
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".forge_tmp_", suffix=suffix)
  os.close(fd)
  try:
    yield tmp
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.unlink(tmp)


def write_atomically(files: dict[str, bytes]) -> None:
  """Writes all files or none: every temporary first, then the renames."""
  with contextlib.ExitStack() as stack:
    for path, data in files.items():
      tmp = stack.enter_context(atomic_path(path))
      with open(tmp, "wb") as f:
        f.write(data)


def file_sha256(path: str) -> str:
  """Hex sha256 of a file, read in 1 MiB chunks."""
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()
