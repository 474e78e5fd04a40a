"""forge_tflm.fileio: written files follow the umask; output directories are checked
before any work."""

import os
import signal
import stat
import subprocess
import sys

import numpy as np
import pytest

from forge_tflm import fileio
from tests.conftest import REPO_ROOT


@pytest.fixture
def umask():
  """Sets the process umask for one test and restores it."""
  saved = os.umask(0o022)
  os.umask(saved)
  yield lambda mask: os.umask(mask)
  os.umask(saved)


def _mode(path) -> int:
  return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002, 0o077])
def test_written_files_follow_the_umask(tmp_path, umask, mask):
  # mkstemp creates its files 0600: before the fix every output was 0600.
  umask(mask)
  fileio.write_atomically({str(tmp_path / "a.json"): b"{}", str(tmp_path / "b.csv"): b"x"})
  with fileio.atomic_path(str(tmp_path / "c.npy"), ".npy") as tmp:
    np.save(tmp, np.zeros(3))
  with open(tmp_path / "plain", "w") as f:  # What a normal open() gives.
    f.write("x")
  expected = 0o666 & ~mask
  assert _mode(tmp_path / "plain") == expected
  for name in ("a.json", "b.csv", "c.npy"):
    assert _mode(tmp_path / name) == expected, name
  assert not [n for n in os.listdir(tmp_path) if n.startswith(".forge_tmp_")]


def test_current_umask_reads_without_changing_it(umask):
  umask(0o027)
  assert fileio.current_umask() == 0o027 and fileio.current_umask() == 0o027


def test_overwriting_a_file_gives_the_umask_mode_too(tmp_path, umask):
  path = tmp_path / "results.json"
  path.write_text("old")
  os.chmod(path, 0o600)
  umask(0o022)
  fileio.write_atomically({str(path): b"new"})
  assert path.read_text() == "new" and _mode(path) == 0o644


def test_check_output_dir_accepts_existing_and_creatable_dirs(tmp_path):
  fileio.check_output_dir(str(tmp_path))
  fileio.check_output_dir(str(tmp_path / "new" / "deeper"))
  assert not (tmp_path / "new").exists()  # Checked, not created.
  assert os.listdir(tmp_path) == []  # The probe file is gone.


def test_check_output_dir_refuses_files_and_paths_under_files(tmp_path):
  f = tmp_path / "results.json"
  f.write_text("{}")
  with pytest.raises(NotADirectoryError, match=f"{f} exists and is not a directory"):
    fileio.check_output_dir(str(f), "--output_dir")
  with pytest.raises(NotADirectoryError, match=f"{f} is not a directory"):
    fileio.check_output_dir(str(f / "sub"))
  with pytest.raises(ValueError, match="empty path"):
    fileio.check_output_dir("")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_check_output_dir_refuses_a_read_only_dir(tmp_path):
  ro = tmp_path / "ro"
  ro.mkdir()
  os.chmod(ro, 0o555)
  try:
    with pytest.raises(PermissionError, match="not writable"):
      fileio.check_output_dir(str(ro / "out"), "--output_dir")
  finally:
    os.chmod(ro, 0o755)


def test_check_output_dir_refuses_an_unwritable_filesystem():
  # Even root cannot create files in /proc: an unwritable directory for any user.
  if not os.path.isdir("/proc/self"):
    pytest.skip("needs /proc")
  with pytest.raises(OSError, match="/proc/self/out"):
    fileio.check_output_dir("/proc/self/out", "--output_dir")


# -- issue 34: convert's model file checked before TensorFlow; no temporary left ------

_CHECK_THEN_MODULES = """
import sys
from forge_tflm.cli import main as cli
code = cli.main(["forge_tflm", "convert", "--model=" + sys.argv[1],
                 "--output=" + sys.argv[2]])
print(code, "tensorflow" in sys.modules, "keras" in sys.modules)
"""


@pytest.mark.parametrize("name, data, message", [
    ("empty.keras", b"", "is empty"),
    ("model.keras", b"\x89HDF\r\n\x1a\n" + bytes(64), "is not a Keras zip archive"),
    ("model.h5", b"PK\x03\x04" + bytes(64), "is not an HDF5 file"),
    ("model.onnx", b"{\"not\": \"protobuf\"}", "is not an ONNX protobuf"),
    ("model.tflite", bytes(64), "is not a TFLite flatbuffer"),
    ("model.pt", b"PK\x03\x04" + bytes(64), "unknown model format '.pt'"),
])
def test_convert_refuses_a_bad_model_file_before_tensorflow(tmp_path, name, data,
                                                            message):
  """Issue 34: an empty file was refused only after TensorFlow loaded (33-45 s)."""
  model = tmp_path / name
  model.write_bytes(data)
  result = subprocess.run([sys.executable, "-c", _CHECK_THEN_MODULES, str(model),
                           str(tmp_path / "out.tflite")], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=300)
  assert result.stdout.split() == ["1", "False", "False"], result
  errors = [l for l in result.stderr.splitlines() if l.startswith("forge_tflm")]
  assert len(errors) == 1 and message in errors[0] and str(model) in errors[0], result


@pytest.mark.parametrize("name, head", [
    ("m.keras", b"PK\x03\x04"), ("m.h5", b"\x89HDF\r\n\x1a\n"), ("m.onnx", b"\x08\x07\x12"),
    ("m.tflite", b"\x1c\x00\x00\x00TFL3"), ("M.KERAS", b"PK\x03\x04")])
def test_model_files_of_each_format_pass_the_check(tmp_path, name, head):
  path = tmp_path / name
  path.write_bytes(head + bytes(64))
  assert fileio.check_model_file(str(path), "--model") == os.path.splitext(name)[1].lower()


_SLOW_WRITE = """
import builtins, os, sys, time
from forge_tflm import fileio
real_open = builtins.open
def slow_open(path, *args, **kwargs):  # Each temporary's write stalls after its data.
  f = real_open(path, *args, **kwargs)
  if os.path.basename(str(path)).startswith(".forge_tmp_"):
    write = f.write
    def slow_write(data):
      n = write(data)
      print("writing", flush=True)
      time.sleep(60)
      return n
    f.write = slow_write
  return f
builtins.open = slow_open
fileio.write_atomically({os.path.join(sys.argv[1], "m.tflite"): b"model",
                         os.path.join(sys.argv[1], "m.json"): b"{}"})
"""


def _terminal_signals():
  for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_write_killed_midway_leaves_no_temporary(tmp_path, sig):
  """Issue 34: `convert` killed during its final write left .forge_tmp_*.tmp files
  (the whole model and a partial manifest) in the output directory."""
  # CI runs the suite with SIGINT ignored (a background job), which a child inherits
  # and Python then keeps: Ctrl-C at a terminal finds the default action, so give it that.
  proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITE, str(tmp_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=REPO_ROOT, preexec_fn=_terminal_signals)
  assert proc.stdout.readline() == "writing\n"
  assert [n for n in os.listdir(tmp_path) if n.startswith(".forge_tmp_")]
  proc.send_signal(sig)
  proc.wait(timeout=60)
  assert proc.returncode != 0
  assert os.listdir(tmp_path) == [], proc.stderr.read()


_DEEP_JSON_CHILD = """
import sys
sys.setrecursionlimit(1_000_000)  # As some libraries do (seen: a pytest run after torch).
from forge_tflm import fileio
try:
  fileio.load_json(sys.argv[1])
except fileio.JSONFileError as e:
  print(e)
"""


@pytest.mark.parametrize("text", ["[" * 200_000 + "]" * 200_000,
                                  '{"a": ' * 100_000 + "1" + "}" * 100_000],
                         ids=["lists", "objects"])
def test_deep_json_is_refused_whatever_the_recursion_limit(tmp_path, text):
  """CI crashed (segfault) in the deep-nesting sites-file test once an earlier test had
  raised the recursion limit: json's C scanner then recursed 100,000 levels on the C
  stack. The depth is now checked before parsing."""
  path = tmp_path / "deep.json"
  path.write_text(text)
  r = subprocess.run([sys.executable, "-c", _DEEP_JSON_CHILD, str(path)], cwd=REPO_ROOT,
                     capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-500:]
  assert "nested more than 64 levels" in r.stdout


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path):
  path = tmp_path / "s.json"
  path.write_text('{"a": "' + "[" * 500 + '\\"{", "b": [[1]]}')
  assert fileio.load_json(str(path)) == {"a": "[" * 500 + '"{', "b": [[1]]}


def test_an_unclosed_string_of_escaped_quotes_is_refused_at_once(tmp_path):
  """Issue 53: the depth pre-check's string regex restarted at every quote of an
  unclosed string full of \\" (quadratic: 32 KB took 40 s, a 1 MB manifest hung every
  reader). The scan is one pass now; 1 MB is refused in well under the bound."""
  import time

  path = tmp_path / "hostile.json"
  path.write_text('{"a": "' + '\\"' * 500_000)
  t0 = time.monotonic()
  with pytest.raises(fileio.JSONFileError, match="Unterminated string"):
    fileio.load_json(str(path))
  assert time.monotonic() - t0 < 10.0  # Quadratic: hours at this size.


def test_escaped_backslash_before_a_quote_closes_the_string(tmp_path):
  path = tmp_path / "s.json"
  path.write_text('{"a": "x\\\\", "b": [[1]], "c": "]\\\\\\""}')
  assert fileio.load_json(str(path)) == {"a": "x\\", "b": [[1]], "c": ']\\"'}


def _depth_reference(text: str) -> int:
  """Bracket depth of JSON text, strings and their escapes skipped, char by char."""
  depth = peak = i = 0
  in_string = False
  while i < len(text):
    c = text[i]
    if in_string and c == "\\":
      i += 2
      continue
    if c == '"':
      in_string = not in_string
    elif not in_string and c in "[{":
      depth += 1
      peak = max(peak, depth)
    elif not in_string and c in "]}":
      depth -= 1
    i += 1
  return peak


def test_the_depth_scan_matches_a_character_scan_on_json():
  """The vectorized pre-check against a plain scan, on random documents whose strings
  hold brackets, quotes and runs of backslashes."""
  import json
  import random

  rng = random.Random(0)
  pieces = ['"', "\\", "[", "]", "{", "}", "a", "\\\\", '\\"']

  def doc(d):
    r = rng.random()
    if d > 6 or r < 0.3:
      return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
    if r < 0.65:
      return [doc(d + 1) for _ in range(rng.randint(0, 3))]
    return {str(doc(d + 1)): doc(d + 1) for _ in range(rng.randint(0, 3))}

  for _ in range(3000):
    text = json.dumps(doc(0))
    assert fileio.text_depth(text.encode()) == _depth_reference(text), text


def test_a_json_file_over_its_readers_limit_is_refused_unread(tmp_path):
  path = tmp_path / "big.json"
  path.write_text("[" + "0," * (fileio.MAX_SETTINGS_JSON_BYTES // 2) + "0]")
  with pytest.raises(fileio.JSONFileError, match=r"big.json: 1,048,579 bytes, more than"
                                                 r" the 1,048,576 a file of this kind"):
    fileio.load_json(str(path))
  assert len(fileio.load_json(str(path), max_bytes=fileio.MAX_RESULTS_JSON_BYTES)) > 5e5


# -- issue 53: a killed write's leftovers; signals during the renames -------------------

def test_the_next_write_removes_a_killed_writers_temporary_not_a_live_ones(tmp_path):
  """Issue 53: a write killed by SIGKILL (which nothing can catch) left its .forge_tmp_
  file for good; the next write of the same file now removes it, once its writer is
  gone (a live writer's temporary stays)."""
  proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITE, str(tmp_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=REPO_ROOT, preexec_fn=_terminal_signals)
  assert proc.stdout.readline() == "writing\n"
  theirs = [n for n in os.listdir(tmp_path) if n.startswith(".forge_tmp_")]
  target = str(tmp_path / "m.tflite")
  fileio.write_atomically({target: b"mine"})  # The writer is alive: its file stays.
  assert sorted(os.listdir(tmp_path)) == sorted(theirs + ["m.tflite"])
  proc.kill()
  proc.wait(timeout=60)
  fileio.write_atomically({target: b"again"})
  assert os.listdir(tmp_path) == ["m.tflite"]


_SIGNAL_DURING_RENAMES = """
import os, sys, threading, time
from forge_tflm import fileio
threading.Thread(target=threading.Event().wait, daemon=True).start()
real_replace, done = os.replace, []
def replace(src, dst):  # The signal comes right after the first rename.
  real_replace(src, dst)
  done.append(dst)
  if len(done) == 1:
    print("killing", flush=True)
    os.kill(os.getpid(), int(sys.argv[2]))
    time.sleep(0.2)  # Time for another thread to take it before the next rename.
os.replace = replace
fileio.write_atomically({os.path.join(sys.argv[1], n): b"new" for n in "abc"})
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda sig: sig.name)
def test_a_signal_during_the_renames_waits_for_them_in_a_threaded_process(tmp_path, sig):
  """Issue 53: the renames only blocked the signals in the writing thread; the kernel
  gave them to another (LiteRT's pool in convert) and Python still raised in the writer
  after the first rename: a new model beside an old manifest, after Ctrl-C."""
  for name in "abc":
    (tmp_path / name).write_bytes(b"old")
  proc = subprocess.run([sys.executable, "-c", _SIGNAL_DURING_RENAMES, str(tmp_path),
                         str(int(sig))], capture_output=True, text=True, cwd=REPO_ROOT,
                        timeout=120, preexec_fn=_terminal_signals)
  assert proc.stdout == "killing\n" and proc.returncode != 0, proc
  assert {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)} == \
      {n: b"new" for n in "abc"}, proc.stderr
