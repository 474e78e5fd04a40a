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
import json
import math
import os
import signal
import tempfile
import threading
from typing import Iterator

import numpy as np


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


# Signals that end a process while it writes. While a temporary file is live, the
# default action of SIGTERM and SIGHUP (die at once, leaving it behind) becomes
# SystemExit, so the `finally` below removes it; Ctrl-C's KeyboardInterrupt already
# unwinds. SIGKILL cannot be caught: only it still leaves a temporary, which the next
# write of that file removes (_remove_stale).
_EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _exit_on_signal(signum, frame):
  raise SystemExit(128 + signum)


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
  """Inside: SIGTERM / SIGHUP raise SystemExit where they would kill the process."""
  installed = []
  if threading.current_thread() is threading.main_thread():
    for sig in _EXIT_SIGNALS:
      if signal.getsignal(sig) == signal.SIG_DFL:
        signal.signal(sig, _exit_on_signal)
        installed.append(sig)
  try:
    yield
  finally:
    for sig in installed:
      signal.signal(sig, signal.SIG_DFL)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
  """Inside: SIGINT, SIGTERM and SIGHUP wait until the block is done, so a set of
  renames completes or, if an earlier one failed, stops as an error would. Blocking them
  in this thread is not enough: the kernel then hands a signal to another thread (LiteRT
  and BLAS pools), and Python still runs its handler here, mid-renames. So the main
  thread also swaps in handlers that only note a signal, and raises it again after."""
  deferred = (signal.SIGINT, *_EXIT_SIGNALS)
  caught: list[int] = []
  saved = {}
  if threading.current_thread() is threading.main_thread():
    for sig in deferred:
      if signal.getsignal(sig) not in (signal.SIG_IGN, None):
        saved[sig] = signal.signal(sig, lambda signum, frame: caught.append(signum))
  old = signal.pthread_sigmask(signal.SIG_BLOCK, deferred)
  try:
    yield
  finally:
    for sig, handler in saved.items():
      signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, old)
    for sig in dict.fromkeys(caught):
      signal.raise_signal(sig)


# Temporaries are named .forge_tmp_<host>_<pid>_<target>_XXXXXXXX<suffix>. A SIGKILL
# (which no handler sees) leaves them behind; the next write of the same target removes
# those whose writer is gone: same host, and that pid no longer exists. A live writer's
# (this process included) and another host's, which may still be writing, stay.
def _host_prefix() -> str:
  return f".forge_tmp_{hashlib.sha256(os.uname().nodename.encode()).hexdigest()[:8]}_"


def _writer_gone(pid: str) -> bool:
  if not pid.isdigit() or int(pid) == 0:
    return False
  try:
    os.kill(int(pid), 0)
  except ProcessLookupError:
    return True
  except OSError:  # EPERM: it exists, as another user.
    pass
  return False


def _remove_stale(directory: str, target: str) -> None:
  """Removes the temporaries of `target` (a name in `directory`) that writers killed
  by SIGKILL left."""
  prefix = _host_prefix()
  for name in os.listdir(directory):
    pid, _, rest = name[len(prefix):].partition("_")
    if (name.startswith(prefix) and rest.startswith(target[:64] + "_")
        and _writer_gone(pid)):
      with contextlib.suppress(FileNotFoundError):  # Another writer removed it first.
        os.unlink(os.path.join(directory, name))


def _new_temp(path: str, suffix: str) -> str:
  """An empty temporary beside `path`, mode 0666 & ~umask (mkstemp's is 0600)."""
  directory, target = os.path.split(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  _remove_stale(directory, target)
  fd, tmp = tempfile.mkstemp(dir=directory, suffix=suffix,
                             prefix=f"{_host_prefix()}{os.getpid()}_{target[:64]}_")
  try:
    os.fchmod(fd, 0o666 & ~current_umask())
  finally:
    os.close(fd)
  return tmp


def _remove(paths) -> None:
  for tmp in paths:
    if os.path.exists(tmp):
      os.unlink(tmp)


@contextlib.contextmanager
def atomic_path(path: str, suffix: str = ".tmp") -> Iterator[str]:
  """Yields a temporary path beside `path`; renames it onto `path` on success.

  `suffix` lets libraries that insist on an extension (np.save, Keras) write it.
  The temporary starts with mode 0666 & ~umask (mkstemp's is 0600), so the file
  ends up with the permissions of any other file the user creates. It is removed
  on any other exit: an exception, Ctrl-C, SIGTERM or SIGHUP.
  """
  with _signals_unwind():
    tmp = _new_temp(path, suffix)
    try:
      yield tmp
      os.replace(tmp, path)
    finally:
      _remove([tmp])


def _write_file(path: str, data: bytes) -> None:
  with open(path, "wb") as f:
    f.write(data)


def write_atomically(files: dict[str, bytes]) -> None:
  """Writes all files or none: every temporary first, then the renames (with the
  exit signals held back, so a kill lands before or after the whole set). No
  temporary survives any exit but SIGKILL. The renames run in the order of `files`:
  put last the file whose presence commits the set, since a SIGKILL between two
  renames (nothing can hold it back) leaves the files before it new, the rest old."""
  temps: list[str] = []
  with _signals_unwind():
    try:
      for path, data in files.items():
        temps.append(_new_temp(path, ".tmp"))
        _write_file(temps[-1], data)
      with _signals_deferred():
        for tmp, path in zip(temps, files):
          os.replace(tmp, path)
    finally:
      _remove(temps)


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


# Model files a command reads, recognised by their first bytes (read before any
# framework loads, so a wrong or empty file is refused in milliseconds, not after
# TensorFlow's ~30 s import).
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# ONNX ModelProto: (field number, protobuf wire type) of its top-level fields; a
# serialized model starts with one of them (ir_version, tag 0x08, in practice).
_ONNX_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2,
                26: 2}


def _is_keras(head: bytes) -> bool:
  return head[:4] == b"PK\x03\x04"  # A zip archive with a first entry.


def _is_hdf5(path: str) -> bool:
  with open(path, "rb") as f:  # The signature sits at 0 or a user block of 2^k >= 512.
    offset = 0
    while True:
      f.seek(offset)
      if f.read(8) == _HDF5_SIGNATURE:
        return True
      offset = max(512, 2 * offset)
      if offset > min(os.path.getsize(path), 1 << 24):
        return False


def _is_onnx(head: bytes) -> bool:
  tag, shift = 0, 0
  for i, byte in enumerate(head[:3]):
    tag |= (byte & 0x7F) << shift
    shift += 7
    if not byte & 0x80:
      return _ONNX_FIELDS.get(tag >> 3) == tag & 7 and len(head) > i + 1
  return False


def _is_tflite(head: bytes) -> bool:
  return len(head) >= 8 and head[4:8] == b"TFL3"


MODEL_FORMATS = {".keras": ("a Keras zip archive", lambda p, h: _is_keras(h)),
                 ".h5": ("an HDF5 file", lambda p, h: _is_hdf5(p)),
                 ".onnx": ("an ONNX protobuf", lambda p, h: _is_onnx(h)),
                 ".tflite": ("a TFLite flatbuffer", lambda p, h: _is_tflite(h))}


def check_model_file(path: str, what: str, extensions=tuple(MODEL_FORMATS)) -> str:
  """A model file that exists, is readable and non-empty, has one of `extensions` and
  starts as that format does; returns the extension, or raises a one-line OSError /
  ValueError naming `what` and `path`. Imports nothing."""
  check_input_file(path, what)
  ext = os.path.splitext(path)[1].lower()
  if ext not in extensions:
    raise ValueError(f"{what} {path}: unknown model format {ext or '(no extension)'!r}"
                     f" (expected {', '.join(extensions)})")
  with open(path, "rb") as f:
    head = f.read(64)
  if not head:
    raise ValueError(f"{what} {path} is empty")
  name, looks_right = MODEL_FORMATS[ext]
  if not looks_right(path, head):
    raise ValueError(f"{what} {path} is not {name} (its first bytes say otherwise):"
                     " a damaged or misnamed file")
  return ext


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


# -- JSON input files -------------------------------------------------------------------

# Every JSON file the CLI reads (manifests, sites files, resume files) is parsed here,
# so each refuses the same hostile inputs with one line naming the file: nesting past
# MAX_JSON_DEPTH (json recurses: ~1000 levels raise RecursionError), NaN / Infinity
# and numbers beyond float range (1e999 parses as inf), integers longer than
# MAX_JSON_INT_DIGITS (Python refuses > 4300 digits with a ValueError of its own) and
# duplicated keys (json keeps the last one silently).
# Sizes: a file past its reader's limit is refused before it is read, so no input
# makes a reader slow. Settings files (manifests, sites files) are a few KB; results
# files (an evaluation's per-stream records, an export's expected.json of a whole
# split: ~28 MB) are bigger.
MAX_JSON_DEPTH = 64
MAX_JSON_INT_DIGITS = 20
MAX_SETTINGS_JSON_BYTES = 1 << 20
MAX_RESULTS_JSON_BYTES = 64 << 20


class JSONFileError(ValueError):
  """A JSON input file that cannot be read; the message is one line naming it."""


def _parse_int(text: str) -> int:
  if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
    raise JSONFileError(f"integer of {len(text)} digits (at most"
                        f" {MAX_JSON_INT_DIGITS})")
  return int(text)


def _parse_float(text: str) -> float:
  value = float(text)
  if not math.isfinite(value):
    raise JSONFileError(f"number {text[:30]} is out of range")
  return value


def _parse_constant(name: str):
  raise JSONFileError(f"{name} is not a number JSON allows")


def _parse_nan(name: str):
  if name == "NaN":
    return float("nan")
  return _parse_constant(name)


def _unique_keys(pairs: list) -> dict:
  out = {}
  for key, value in pairs:
    if key in out:
      raise JSONFileError(f"key {key[:60]!r} appears twice in one object")
    out[key] = value
  return out


def _depth(value) -> int:
  """Nesting depth of parsed JSON, iteratively (no recursion on hostile input)."""
  deepest, stack = 0, [(value, 1)]
  while stack:
    v, d = stack.pop()
    if isinstance(v, (dict, list)):
      deepest = max(deepest, d)
      if d > MAX_JSON_DEPTH:
        return d
      stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
  return deepest


def text_depth(raw: bytes) -> int:
  """The deepest bracket nesting of JSON text, strings skipped: checked before the
  parser runs, because json's C scanner recurses on the C stack and only stops at the
  interpreter's recursion limit, which libraries raise (a deep file then overflows the
  stack: a segfault, not a RecursionError). Vectorized: a Python loop over tokens took
  0.45 s per MB of brackets, and a regex for whole strings was quadratic on an
  unclosed string full of \\" (32 KB: 40 s)."""
  b = np.frombuffer(raw, np.uint8)
  if b.size == 0:
    return 0
  idx = np.arange(b.size)
  # A quote is escaped when an odd run of backslashes ends just before it.
  last_other = np.maximum.accumulate(np.where(b != ord("\\"), idx, -1))
  run_before = np.empty(b.size, np.int64)
  run_before[0] = 0
  run_before[1:] = idx[:-1] - last_other[:-1]
  quote = (b == ord('"')) & (run_before % 2 == 0)
  in_string = (np.cumsum(quote) - quote) % 2 == 1  # Quotes strictly before: odd.
  step = np.zeros(b.size, np.int8)
  step[(b == ord("[")) | (b == ord("{"))] = 1
  step[(b == ord("]")) | (b == ord("}"))] = -1
  step[in_string] = 0
  return int(max(np.cumsum(step, dtype=np.int64).max(), 0))


def load_json(path: str, nan: bool = False, max_bytes: int = MAX_SETTINGS_JSON_BYTES):
  """The parsed JSON of file `path`; JSONFileError (one line, naming `path`) when it
  is not strict JSON within the limits above (`nan`: NaN is read, for files whose
  writer records "no value" so; `max_bytes`: the reader's size limit). OSError as
  open() raises it."""
  with open(path, "rb") as f:
    size = os.fstat(f.fileno()).st_size
    if size > max_bytes:
      raise JSONFileError(f"{path}: {size:,} bytes, more than the {max_bytes:,} a file"
                          " of this kind can be")
    raw = f.read(max_bytes + 1)
  if len(raw) > max_bytes:  # Not a regular file (a pipe, /dev/zero): no size to stat.
    raise JSONFileError(f"{path}: more than the {max_bytes:,} bytes a file of this kind"
                        " can be")
  try:
    text = raw.decode("utf-8")
    if text_depth(raw) > MAX_JSON_DEPTH:
      raise RecursionError
    data = json.loads(text, object_pairs_hook=_unique_keys, parse_int=_parse_int,
                      parse_float=_parse_float,
                      parse_constant=_parse_nan if nan else _parse_constant)
  except UnicodeDecodeError:
    raise JSONFileError(f"{path}: not JSON (not UTF-8 text)") from None
  except RecursionError:
    raise JSONFileError(f"{path}: not JSON we read (nested more than"
                        f" {MAX_JSON_DEPTH} levels)") from None
  except JSONFileError as e:
    raise JSONFileError(f"{path}: not JSON we read ({e})") from None
  except ValueError as e:  # json.JSONDecodeError and int/float conversions.
    raise JSONFileError(f"{path}: not JSON ({' '.join(str(e).split())})") from None
  if _depth(data) > MAX_JSON_DEPTH:
    raise JSONFileError(f"{path}: not JSON we read (nested more than"
                        f" {MAX_JSON_DEPTH} levels)")
  return data
