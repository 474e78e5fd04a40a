"""Issue 53: a `convert` interrupted at any point (SIGINT, SIGTERM, SIGKILL) leaves the
complete set of outputs (model, manifest, plain model, C array) or what was there
before; only SIGKILL between two renames leaves a mix, which every reader of the model
refuses in one line naming the fix; the next convert cleans up.

Each case is a real convert (a hand-made int8 model through the int8 door: no
TensorFlow, 0.05 s) in a child that signals itself at one point of its final write;
the children are forked from one process that imported the converter once (0.5 s).
"""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from forge_tflm import tflite_graph as tg
from forge_tflm.artifact import Artifact, manifest_path
from forge_tflm.converter import outputs, pipeline
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.errors import ArtifactError
from tests.conftest import REPO_ROOT
from tests.converter import handmade

OUTPUTS = 5  # Model, manifest, C header and source, plain model.

# Runs each case [output, point, signal] in a child forked from here; prints the
# children's wait statuses. A case's marker file (beside its output folder) says the
# child reached its point.
_SERVER = """
import json, os, sys, threading, time
import numpy as np
from forge_tflm.converter import pipeline
from forge_tflm.converter.options import ConvertOptions

def run(out, point, sig):
  marker = os.path.join(os.path.dirname(os.path.dirname(out)), "killing")
  def die(wait=60):  # Where exit signals are not held back, they land in the sleep;
    open(marker, "w").close()  # in the renames, time for another thread to take them.
    os.kill(os.getpid(), sig)
    time.sleep(wait)
  if point == "before":
    real_write_atomically = pipeline.write_atomically
    def write_atomically(files):
      die()
      real_write_atomically(files)
    pipeline.write_atomically = write_atomically
  elif point == "temporaries":  # The first temporary written, the others not yet.
    import builtins
    real_open = builtins.open
    class Written:  # The temporary, closed, then the signal.
      def __init__(self, f):
        self.f = f
      def __enter__(self):
        return self
      def __exit__(self, *exc):
        self.f.close()
        die()
      def write(self, data):
        return self.f.write(data)
    def open_(path, mode="r", *args, **kwargs):
      f = real_open(path, mode, *args, **kwargs)
      temporary = "w" in mode and ".forge_tmp_" in os.path.basename(str(path))
      return Written(f) if temporary else f
    builtins.open = open_
  else:  # after_rename_<k>: right after the k-th rename.
    after, real_replace, done = int(point.rsplit("_", 1)[1]), os.replace, []
    def replace(src, dst):
      real_replace(src, dst)
      done.append(dst)
      if len(done) == after:
        die(wait=0.1)
    os.replace = replace
  # convert_to(src, out, seed=0), without importing pytest.
  pipeline.convert(sys.argv[1], out,
                   np.random.default_rng(0).integers(0, 256, (8, 4, 4, 3), np.uint8),
                   ConvertOptions(calibration_size=8, parity_images=4, c_array=True),
                   plain_output=out.replace(".tflite", "_plain.tflite"))

statuses = []
for out, point, sig in json.loads(sys.argv[2]):
  pid = os.fork()
  if pid == 0:
    # A convert process has more threads (OpenBLAS's pool); a forked child has only this.
    threading.Thread(target=threading.Event().wait, daemon=True).start()
    code = 1  # An exception (KeyboardInterrupt, SystemExit) has unwound: exit as it.
    try:
      run(out, point, sig)
      code = 0
    finally:
      os._exit(code)
  statuses.append(os.waitpid(pid, 0)[1])
print(json.dumps(statuses))
"""


def convert_to(src: str, out: str, seed: int):
  """The convert under test (the child runs it too): every output, calibration images
  from `seed`."""
  calibration = np.random.default_rng(seed).integers(0, 256, (8, 4, 4, 3), np.uint8)
  return pipeline.convert(src, out, calibration,
                          ConvertOptions(calibration_size=8, parity_images=4,
                                         c_array=True),
                          plain_output=out.replace(".tflite", "_plain.tflite"))


def _files(d) -> dict[str, bytes]:
  return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


def _temporaries(d) -> list[str]:
  return [n for n in os.listdir(d) if n.startswith(".forge_tmp_")]


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
  """(source model, old set, new set): the outputs of two converts that differ."""
  d = tmp_path_factory.mktemp("sets")
  src = str(d / "two.tflite")
  with open(src, "wb") as f:
    f.write(tg.save_model(handmade.two_convs(size=4, cin=3, channels=(4, 3))[0]))
  for name, seed in (("old", 1), ("new", 0)):
    os.mkdir(d / name)
    convert_to(src, str(d / name / "m.tflite"), seed)
  old, new = _files(d / "old"), _files(d / "new")
  assert len(new) == OUTPUTS and all(old[n] != new[n] for n in ("m.tflite", "m.json"))
  return src, old, new


def _refused_in_one_line(model: str) -> None:
  """The state a SIGKILL between renames leaves: every reader of the model (all go
  through Artifact.load) refuses it in one line that says to convert again."""
  if not os.path.exists(model):  # A first convert: nothing to read yet.
    return
  for require_manifest in (False, True):
    with pytest.raises(ArtifactError) as e:
      Artifact.load(model, require_manifest=require_manifest)
    assert "\n" not in str(e.value) and "forge_tflm convert" in str(e.value), e.value


CASES = [(point, sig, "old") for point in ("before", "temporaries", "after_rename_1",
                                           f"after_rename_{OUTPUTS - 1}")
         for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)]
CASES += [(point, signal.SIGKILL, "empty")
          for point in ("temporaries", "after_rename_1", f"after_rename_{OUTPUTS - 1}")]


def _terminal_signals():
  # CI runs the suite with SIGINT ignored (a background job), which a child inherits.
  for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_DFL)


@pytest.fixture(scope="module")
def killed(tmp_path_factory, sets):
  """{case: (output folder, wait status, point reached)}: every case run at once."""
  src, old, _ = sets
  root = tmp_path_factory.mktemp("killed")
  for i, (_, _, before) in enumerate(CASES):
    os.makedirs(root / str(i) / "out")
    for name, data in (old.items() if before == "old" else ()):
      (root / str(i) / "out" / name).write_bytes(data)
  runs = [[str(root / str(i) / "out" / "m.tflite"), point, int(sig)]
          for i, (point, sig, _) in enumerate(CASES)]
  proc = subprocess.run([sys.executable, "-c", _SERVER, src, json.dumps(runs)],
                        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
                        preexec_fn=_terminal_signals)
  assert proc.returncode == 0, proc.stderr
  statuses = json.loads(proc.stdout.splitlines()[-1])
  return {case: (root / str(i) / "out", status, (root / str(i) / "killing").exists())
          for i, (case, status) in enumerate(zip(CASES, statuses))}


@pytest.mark.parametrize("case", CASES, ids=[f"{p}-{s.name}-{b}" for p, s, b in CASES])
def test_an_interrupted_convert_leaves_all_or_nothing(sets, killed, case):
  """Before: a SIGKILL while the temporaries were written left them for good, and a
  signal between the renames (model first, manifest second; Ctrl-C too: LiteRT's threads
  took it) could leave a new model and manifest beside the old C array and plain model."""
  src, old, new = sets
  (point, sig, before), (d, status, reached) = case, killed[case]
  out = d / "m.tflite"
  assert reached and status != 0
  visible = {n: b for n, b in _files(d).items() if not n.startswith(".forge_tmp_")}
  if point.startswith("after_rename") and sig != signal.SIGKILL:
    assert visible == new and not _temporaries(d)  # The renames finish, then it exits.
    Artifact.load(str(out), require_manifest=True)
  elif point.startswith("after_rename"):
    _refused_in_one_line(str(out))
  else:
    assert visible == (old if before == "old" else {})
    assert sig == signal.SIGKILL or not _temporaries(d)
  convert_to(src, str(out), seed=0)  # The next convert: the new set and nothing else.
  assert _files(d) == new


def test_the_model_is_renamed_last(tmp_path, sets, monkeypatch):
  """The model is the commit point: a SIGKILL before its rename leaves the old model
  beside a new manifest (refused: sha256 mismatch) or, on a first convert, no model. The
  manifest last would leave a first convert's model without one, which `evaluate`
  accepts (a manifest is optional there) with the default input contract."""
  src, _, _ = sets
  renamed = []
  real_replace = os.replace
  monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append(b), real_replace(a, b)))
  out = str(tmp_path / "m.tflite")
  convert_to(src, out, seed=0)
  paths = outputs.output_paths(out, True, out.replace(".tflite", "_plain.tflite"))
  assert sorted(renamed) == sorted(paths.values()) and renamed[-1] == out
  assert manifest_path(out) in renamed
