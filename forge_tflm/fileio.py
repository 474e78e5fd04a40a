"""Atomic file writes (readers never see a half-written file, a failure leaves
none), file hashes, and the up-front checks of output locations.

Every writer in the project (dataset and corruption caches, training
checkpoints, converter outputs, evaluation reports) goes through here. Written
files get the permissions a plain `open(path, "w")` would give them (0666 minus
the umask), not the 0600 of a temporary file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from typing import Iterator


def current_umask() -> int:
  """The process umask, read without changing it where the OS allows (Linux)."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("Umask:"):
          return int(line.split()[1], 8)
  except (OSError, ValueError, IndexError):
    pass
  mask = os.umask(0o022)  # Elsewhere: the only portable read is a set and reset.
  os.umask(mask)
  return mask


@contextlib.contextmanager
def atomic_path(path: str, suffix: str = ".tmp") -> Iterator[str]:
  """Yields a temporary path beside `path`; renames it onto `path` on success.

  `suffix` lets libraries that insist on an extension (np.save, Keras) write it.
  The temporary starts with mode 0666 & ~umask (mkstemp's is 0600), so the file
  ends up with the permissions of any other file the user creates.
  """
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".forge_tmp_", suffix=suffix)
  try:
    os.fchmod(fd, 0o666 & ~current_umask())
  finally:
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


def check_input_file(path: str, what: str) -> None:
  """An input that must be a readable file: one-line OSError naming `what` otherwise."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"{what} {path} does not exist")
  if not os.path.isfile(path):
    raise IsADirectoryError(f"{what} {path} is not a file")
  if not os.access(path, os.R_OK):
    raise PermissionError(f"{what} {path} is not readable")


def check_output_dir(path: str, what: str = "output directory") -> None:
  """Raises a one-line error unless files can be created in directory `path`.

  Nothing is created: an existing directory is probed with a temporary file
  (removed at once); a missing one needs its nearest existing ancestor to be a
  writable directory (it is created when the first file is written).
  """
  if not path:
    raise ValueError(f"{what}: empty path")
  path = os.path.abspath(path)
  if os.path.exists(path) and not os.path.isdir(path):
    raise NotADirectoryError(f"{what} {path} exists and is not a directory")
  probe = path
  while not os.path.exists(probe):
    parent = os.path.dirname(probe)
    if parent == probe:
      break
    probe = parent
  if not os.path.isdir(probe):
    raise NotADirectoryError(f"{what} {path} cannot be created: {probe} is not a"
                             " directory")
  try:
    fd, tmp = tempfile.mkstemp(dir=probe, prefix=".forge_probe_")
  except OSError as e:
    reason = e.strerror or type(e).__name__
    raise PermissionError(
        f"{what} {path} is not writable ({probe}: {reason})") from e
  os.close(fd)
  os.unlink(tmp)
