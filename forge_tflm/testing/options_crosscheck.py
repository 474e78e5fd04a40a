"""Host = device for FORGE_RECALIB options: the C++ parser against the Python decoder.

A deterministic generator (`buffers`) makes option buffers covering every option
field: structured maps (any subset of the keys, each value of any flexbuffer type
and width, boundary values, unknown and duplicate keys) and byte-level mutants of
valid maps (byte and bit changes, truncation, insertion, deletion, splices). The
fuzz harness (custom_ops/forge_recalib/fuzz, driver build) parses each one with the
C++ parser the TFLM kernel uses, runs every C path that consumes the options under
ASan/UBSan (plain C, the x86 variant, the class functions) and prints its verdict;
`crosscheck` compares that with ops.decode_options on the same bytes: accept/reject
and every field's value must agree.

Used by tests/custom_ops/test_fuzz_options.py (CI count) and
benchmarks/options_crosscheck.py (the committed long run).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import struct
import subprocess

import numpy as np
from flatbuffers import flexbuffers

from forge_tflm import ops
from forge_tflm.ops import options as op_options

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OP_DIR = os.path.join(REPO_ROOT, "custom_ops", "forge_recalib")
SRC_DIR = os.path.join(OP_DIR, "src")
HARNESS = os.path.join(OP_DIR, "fuzz", "forge_recalib_options_fuzz.cc")
SANITIZE = ["-g", "-O1", "-ffp-contract=off", "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
# The host variant too (the x86 hooks), as the Python extension builds it.
X86 = ["-DFORGE_RECALIB_X86=1"]
FLT_MAX = float(np.finfo(np.float32).max)


def nice(cmd, env=None, timeout=900, **kwargs):
  """cmd at low priority, stdin closed, bounded in time. Leak checks off: LeakSanitizer's
  stop-the-world once left the harness stopped under its own tracer forever (a CI run
  hung 11 minutes in the cross-check); memory errors are what the harness is for."""
  env = dict(os.environ if env is None else env)
  env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "detect_leaks=0"]))
  return subprocess.run(["nice", "-n", "19", *cmd], capture_output=True, text=True,
                        stdin=subprocess.DEVNULL, env=env, timeout=timeout, **kwargs)


def flatbuffers_include() -> str | None:
  """flexbuffers.h's include dir, the device's own version first.

  $FLATBUFFERS_INCLUDE_DIR, $TFLM_THIRD_PARTY_DIR/flatbuffers/include, the
  esp-tflite-micro snapshot beside the checkout (flatbuffers 25.9.23, the version
  TFLM pins), else /usr/include (Debian's libflatbuffers-dev, an older verifier).
  """
  candidates = [os.environ.get("FLATBUFFERS_INCLUDE_DIR")]
  if os.environ.get("TFLM_THIRD_PARTY_DIR"):
    candidates.append(os.path.join(os.environ["TFLM_THIRD_PARTY_DIR"], "flatbuffers",
                                   "include"))
  from forge_tflm.deploy import toolchains
  try:
    esp = toolchains.snapshot("esp-tflite-micro")
  except toolchains.ToolMissing:  # No tarball in ../shared/third_party: the next one.
    pass
  else:
    candidates.append(os.path.join(esp, "third_party", "flatbuffers", "include"))
  candidates.append("/usr/include")
  for inc in candidates:
    if inc and os.path.exists(os.path.join(inc, "flatbuffers", "flexbuffers.h")):
      return inc
  return None


def flatbuffers_version(inc: str) -> str:
  with open(os.path.join(inc, "flatbuffers", "base.h")) as f:
    text = f.read()
  parts = []
  for part in ("MAJOR", "MINOR", "REVISION"):
    key = f"#define FLATBUFFERS_VERSION_{part} "
    parts.append(text.split(key, 1)[1].split()[0] if key in text else "?")
  return ".".join(parts)


def build(cc, cxx, extra, inc, out_dir, name) -> tuple[str | None, str]:
  """The harness binary (path, "") or (None, the compiler's complaint)."""
  objs = []
  with open(os.path.join(OP_DIR, "sources.txt")) as f:  # the op's one source list
    core = [p for p in f.read().split() if p.endswith(".c")]
  for src in core:
    obj = os.path.join(out_dir, f"{name}_{os.path.basename(src)}.o")
    r = nice([cc, "-std=c99", *SANITIZE, *X86, "-c", os.path.join(OP_DIR, src),
              "-o", obj])
    if r.returncode != 0:
      return None, r.stderr
    objs.append(obj)
  binary = os.path.join(out_dir, name)
  r = nice([cxx, "-std=c++17", *SANITIZE, *X86, *extra, "-I", SRC_DIR, "-I", inc,
            HARNESS, os.path.join(SRC_DIR, "forge_recalib_options.cc"), *objs,
            "-o", binary])
  return (binary, "") if r.returncode == 0 else (None, r.stderr)


def build_driver(inc, out_dir) -> tuple[str | None, str]:
  """The g++ build with the harness's own deterministic driver (-stream=FILE)."""
  return build("gcc", "g++", ["-DFORGE_RECALIB_FUZZ_DRIVER"], inc, out_dir, "driver")


# Buffers the Python decoder accepted and the C++ parser refuses (issue 34): one
# offset of encode_options(RecalibOptions(momentum=0.1, activation="relu")) raised by
# the buffer's length (91) points past its end; Python's flexbuffers reader took the
# negative position it computed as an index from the end, which wraps onto the
# original target, so the buffer decoded to the original options. Last: a byte
# inserted in front misaligns the map (the C++ parser's layout pre-check).
SEED = ("6d6f6d656e74756d006570730061637469766174696f6e000472656c750076617269616e636500"
         "0772756e6e696e670004242933160000000700000001000000040000002b000000acc52737cd"
         "cccc3d28000000140e0e14142601")
REGRESSIONS = {  # what -> (byte index, new value) in SEED; index -1: insert 0x00 first
    "key offset": (49, 36 + 91),
    "string value offset": (80, 40 + 91),
    "key vector offset": (56, 7 + 91),
    "map offset": (88, 20 + 91),
    "root width": (90, 1 + 91),
    "misaligned map": (-1, 0),
}


def regression_buffer(what: str) -> bytes:
  at, value = REGRESSIONS[what]
  data = bytearray.fromhex(SEED)
  if at < 0:
    return bytes([value]) + bytes(data)
  data[at] = value
  return bytes(data)


# ----------------------------------------------------------------- the generator

# Values worth trying for every field, whatever its kind (each field also gets the
# others': a float for an int field is a type error both sides must report).
_FLOATS = [0.0, -0.0, 1.0, 0.5, 0.1, 1e-5, 1e-3, 1.0000001, -0.1, 1.5, 1e-45, 1e-50,
           3.4e38, 3.5e38, 1e300, float("nan"), float("inf"), float("-inf"), 2.0, 64.0]
_INTS = [0, 1, 2, 3, 8, 10, 31, 32, 33, 64, 100, 255, 256, 257, 2**24, 2**24 + 1,
         2**31 - 1, 2**31, 2**32, -1, -5, -2**31, 2**63 - 1]
_STRINGS = ["none", "relu", "relu6", "batch", "running", "", "RELU", "relu1", "train",
            "none\x00", "momentum"]
_UNKNOWN_KEYS = ["momentun", "extra", "", "classes", "Window", "class_margin"]


def _field_kinds() -> dict[str, str]:
  return dict(op_options.OPTION_FIELDS)


# Valid values of each field (half the time one of these: a valid map is then likely).
_VALID = {"momentum": [0.0, 0.1, 1.0, 0.01], "window": [1, 8, 64, 640, 2**31 - 1],
          "eps": [1e-5, 1e-3, 1e-45, 3.4e38], "label_safe": [0, 1]}


def _value_for(rng, key: str, kind: str):
  """(type tag, value): mostly the field's own kind, sometimes any other."""
  if key in _VALID and rng.random() < 0.5:
    v = rng.choice(_VALID[key])
    return ("float", float(v)) if kind == "FLOAT" else ("int", int(v))
  r = rng.random()
  if r < 0.85:
    own = {"FLOAT": "float", "INT": "int"}.get(kind, "string")
  else:
    own = rng.choice(["float", "int", "uint", "string", "bool", "null", "blob", "vector",
                      "indirect_int", "indirect_float", "map"])
  if own == "int" and rng.random() < 0.25:
    own = rng.choice(["uint", "indirect_int"])
  if own == "float" and rng.random() < 0.15:
    own = "indirect_float"
  if own in ("float", "indirect_float"):
    v = rng.choice(_FLOATS) if rng.random() < 0.8 else float(rng.uniform(-2, 2))
    return own, v
  if own in ("int", "uint", "indirect_int"):
    v = int(rng.choice(_INTS)) if rng.random() < 0.8 else int(rng.integers(-300, 70000))
    if own == "uint":
      v = abs(v) % 2**64
    return own, v
  if own == "string":
    if kind in op_options.ENUM_VALUES and rng.random() < 0.8:
      return own, str(rng.choice(op_options.ENUM_VALUES[kind]))
    return own, str(rng.choice(_STRINGS))
  return own, None


def _float_width(value: float, width: int) -> int:
  if width in (4, 8):
    return width
  # The builder's own choice packs as float32 first, which fails past its range.
  return 8 if math.isfinite(value) and abs(value) > FLT_MAX else 0


def _put(fbb, tag: str, value, width: int):
  if tag == "float":
    fbb.Float(value, byte_width=_float_width(value, width))
  elif tag == "int":
    fbb.Int(value, byte_width=width)
  elif tag == "uint":
    fbb.UInt(value, byte_width=width)
  elif tag == "indirect_int":
    fbb.IndirectInt(value, byte_width=width)
  elif tag == "indirect_float":
    fbb.IndirectFloat(value, byte_width=_float_width(value, width))
  elif tag == "string":
    fbb.String(value)
  elif tag == "bool":
    fbb.Bool(width % 2 == 0)
  elif tag == "null":
    fbb.Null()
  elif tag == "blob":
    fbb.Blob(bytes(width % 4))
  elif tag == "vector":
    fbb.VectorFromElements([0.1, 2])
  else:
    with fbb.Map():
      fbb.Key("momentum")
      fbb.Float(0.1)


def _structured(rng) -> bytes:
  """A map with a random subset of the option keys (plus, rarely, a stranger)."""
  kinds = _field_kinds()
  names = list(kinds)
  # Mostly exactly one of the two rates, as a valid map has.
  rates = ["momentum", "window"] if rng.random() < 0.1 else [rng.choice(["momentum",
                                                                        "window"])]
  keys = rates + [n for n in names if n not in ("momentum", "window") and rng.random() < 0.5]
  if rng.random() < 0.05:
    keys.append(str(rng.choice(_UNKNOWN_KEYS)))
  values = [(key, *_value_for(rng, key, kinds.get(key, "INT")),
             int(rng.choice([0, 1, 2, 4, 8]))) for key in keys]
  try:
    return _build_map(values)
  except (ValueError, OverflowError, struct.error, TypeError, RuntimeError):
    # A value too wide for the width drawn: the builder's own width instead.
    return _build_map([(k, tag, v, 0) for k, tag, v, _ in values])


def _build_map(values) -> bytes:
  fbb = flexbuffers.Builder()
  with fbb.Map():
    for key, tag, value, width in values:
      fbb.Key(key)
      _put(fbb, tag, value, width)
  return bytes(fbb.Finish())


def seed_options() -> list[ops.RecalibOptions]:
  """Valid options over every field: both rates, every enum, the class options."""
  out = []
  for act in ops.ACTIVATIONS:
    for var in op_options.VARIANCES:
      out.append(ops.RecalibOptions(momentum=0.1, activation=act, variance=var))
      out.append(ops.RecalibOptions(window=64, eps=1e-3, activation=act, variance=var))
  out += [ops.RecalibOptions(momentum=0.0), ops.RecalibOptions(momentum=1.0),
          ops.RecalibOptions(window=1), ops.RecalibOptions(window=2**31 - 1),
          ops.RecalibOptions(momentum=1 / 3, eps=1e-45),
          ops.RecalibOptions(momentum=0.5, eps=3.4e38)]
  out += [ops.RecalibOptions(window=640, label_safe=1),
          ops.RecalibOptions(momentum=0.01, activation="relu", label_safe=1)]
  return out


def seeds() -> list[bytes]:
  return [ops.encode_options(o) for o in seed_options()]


def _mutate(rng, data: bytes, pool: list[bytes]) -> bytes:
  b = bytearray(data)
  for _ in range(1 if rng.random() < 0.6 else int(rng.integers(2, 5))):
    op = int(rng.integers(7))
    if op == 0 and b:
      b[int(rng.integers(len(b)))] = int(rng.integers(256))
    elif op == 1 and b:
      b[int(rng.integers(len(b)))] ^= 1 << int(rng.integers(8))
    elif op == 2:
      b = b[:int(rng.integers(len(b) + 1))]
    elif op == 3:
      b.insert(int(rng.integers(len(b) + 1)), int(rng.integers(256)))
    elif op == 4 and b:
      del b[int(rng.integers(len(b)))]
    elif op == 5:
      other = pool[int(rng.integers(len(pool)))]
      b = b[:int(rng.integers(len(b) + 1))] + other[int(rng.integers(len(other) + 1)):]
    elif b:  # A byte from the interesting set (type bytes, widths, terminators).
      b[int(rng.integers(len(b)))] = int(rng.choice(
          [0, 1, 2, 3, 4, 8, 0x0c, 0x0e, 0x0f, 0x14, 0x24, 0x25, 0x7f, 0x80, 0xff]))
  return bytes(b[:2 * op_options.MAX_OPTIONS_BYTES])


def buffers(count: int, seed: int = 0):
  """`count` option buffers, the same for the same (count, seed)."""
  rng = np.random.default_rng(seed)
  pool = seeds()
  yield from pool[:count]
  for _ in range(count - min(count, len(pool))):
    r = rng.random()
    if r < 0.3:
      yield _structured(rng)
    elif r < 0.55:
      yield _mutate(rng, _structured(rng), pool)
    else:
      yield _mutate(rng, pool[int(rng.integers(len(pool)))], pool)


# ---------------------------------------------------------------- the comparison

def python_verdict(data: bytes) -> str:
  """The harness's verdict line for `data`, from ops.decode_options ("ERR" if it
  refuses; the C++ side's message is not compared)."""
  try:
    o = ops.decode_options(data)
  except ValueError:
    return "ERR"
  parts = [f"use_window={int(o.use_window)}"]
  for name, kind in op_options.OPTION_FIELDS:
    v = getattr(o, name)
    if kind == "FLOAT":  # None: the C default 0 (momentum when window is set).
      parts.append(f"{name}={int(np.float32(0.0 if v is None else v).view(np.uint32)):08x}")
    elif kind == "INT":
      parts.append(f"{name}={0 if v is None else v}")
    else:
      values = op_options.ENUM_VALUES[kind]  # None: the C default, code 0.
      parts.append(f"{name}={values.index(values[0] if v is None else v)}")
  return "OK " + " ".join(parts)


@dataclasses.dataclass
class Result:
  buffers: int = 0
  both_ok: int = 0
  both_err: int = 0
  disagreements: list = dataclasses.field(default_factory=list)  # (hex, c++, python)
  harness_summary: str = ""


def fnv1a64(data: bytes) -> int:
  h = 0xcbf29ce484222325
  for b in data:
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
  return h


def run_chunk(binary: str, chunk: list[bytes], work_dir: str, result: Result):
  """Feeds `chunk` to the harness (-stream) and compares each verdict."""
  stream = os.path.join(work_dir, "inputs.bin")
  with open(stream, "wb") as f:
    for data in chunk:
      f.write(struct.pack("<H", len(data)) + data)
  r = nice([binary, f"-stream={stream}"], env={**os.environ, "FORGE_RECALIB_FUZZ_PRINT": "1"},
           timeout=3600)
  if r.returncode != 0:
    raise RuntimeError(f"harness failed (rc {r.returncode}): {r.stderr[-4000:]}")
  lines = r.stdout.splitlines()
  if len(lines) != len(chunk):
    raise RuntimeError(f"harness printed {len(lines)} verdicts for {len(chunk)} inputs")
  for i, (data, line) in enumerate(zip(chunk, lines)):
    digest, verdict = line.split(" ", 1)
    # Lines come in input order; a sample of hashes checks that (all: too slow).
    if i % 1000 == 0 and digest != f"{fnv1a64(data):016x}":
      raise RuntimeError(f"verdict out of order for {data.hex()}")
    py = python_verdict(data)
    if verdict.startswith("ERR") and py == "ERR":
      result.both_err += 1
    elif verdict == py:
      result.both_ok += 1
    else:
      result.disagreements.append((data.hex(), verdict, py))
  result.buffers += len(chunk)
  result.harness_summary = r.stderr.strip().splitlines()[-1]


def crosscheck(binary: str, count: int, seed: int, work_dir: str,
               chunk_size: int = 100_000) -> Result:
  result = Result()
  chunk = []
  for data in buffers(count, seed):
    chunk.append(data)
    if len(chunk) == chunk_size:
      run_chunk(binary, chunk, work_dir, result)
      chunk = []
  if chunk:
    run_chunk(binary, chunk, work_dir, result)
  return result


def compilers_available() -> bool:
  return shutil.which("gcc") is not None and shutil.which("g++") is not None
