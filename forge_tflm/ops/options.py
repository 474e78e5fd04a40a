"""The op's vocabulary: options, activations, the momentum rule (one definition each).

Enum spellings, option fields and limits come from the C core through the binding
(`_forge_recalib_core`: forge_recalib.h's name tables and FORGE_RECALIB_OPTION_FIELDS),
so Python never repeats them. `RecalibOptions` is the one options type: the converter,
the manifest, the evaluator and the CLI flags are all built from its fields.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np
from flatbuffers import flexbuffers


def core():
  """The compiled C core module (forge_tflm.ops._forge_recalib_core)."""
  try:
    from forge_tflm.ops import _forge_recalib_core
  except ImportError as e:
    raise ImportError(
        "forge_tflm.ops._forge_recalib_core is not built; run "
        "`pip install -e . --no-build-isolation`") from e
  return _forge_recalib_core


_CORE = core()

MAX_OPTIONS_BYTES = _CORE.MAX_OPTIONS_BYTES
DEFAULT_EPS = float(np.float32(_CORE.DEFAULT_EPS))
VARIANCES: tuple[str, ...] = _CORE.VARIANCES
ARITHMETICS: tuple[str, ...] = _CORE.ARITHMETICS
MODES: tuple[str, ...] = _CORE.MODES
PATHS: tuple[str, ...] = _CORE.PATHS
VARIANTS: tuple[str, ...] = _CORE.VARIANTS
# (field name, kind): kind FLOAT, INT, or the enum whose names the value takes.
OPTION_FIELDS: tuple[tuple[str, str], ...] = _CORE.OPTION_FIELDS
_INT32_MAX = 2**31 - 1
_FLT_MAX = float(np.finfo(np.float32).max)


@dataclasses.dataclass(frozen=True)
class Activation:
  """An activation FORGE_RECALIB can apply after renormalizing.

  code: the C enum value (forge_recalib_activation); low/high: the real-valued
  range it clamps to; tflite_code: TFLite's ActivationFunctionType of the same
  activation fused into a conv.
  """
  name: str
  code: int
  low: float
  high: float

  @property
  def tflite_code(self) -> int:
    from ai_edge_litert import schema_py_generated as schema
    return getattr(schema.ActivationFunctionType, self.name.upper())


# What each activation the C core knows does; the names and codes are the core's.
_CLAMPS = {"none": (-math.inf, math.inf), "relu": (0.0, math.inf), "relu6": (0.0, 6.0)}
if set(_CLAMPS) != set(_CORE.ACTIVATIONS):
  raise ImportError(f"the C core's activations {_CORE.ACTIVATIONS} differ from the"
                    f" Python ones {tuple(_CLAMPS)}: rebuild the extension")
ACTIVATIONS: dict[str, Activation] = {
    name: Activation(name, code, *_CLAMPS[name]) for code, name in enumerate(_CORE.ACTIVATIONS)}


def activation_from_tflite(code: int) -> Activation | None:
  """The activation of TFLite's fused-activation `code`, or None if FORGE has none."""
  for act in ACTIVATIONS.values():
    if act.tflite_code == code:
      return act
  return None


def _is_real(v) -> bool:
  return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _to_float32(v) -> np.float32 | None:
  """float32 of v, or None if v is outside the float32 range or NaN (as C++)."""
  v = float(v)
  if not -_FLT_MAX <= v <= _FLT_MAX:
    return None
  return np.float32(v)


def momentum_rule(momentum: float | None, window: int | None, batch: int) -> np.float32:
  """m of SPEC step 3: the fixed momentum, or min(1, (float)N / (float)W)."""
  if window is not None:
    return min(np.float32(np.float32(batch) / np.float32(window)), np.float32(1.0))
  return np.float32(momentum)


def _help(text: str) -> dict:
  return {"help": text}


@dataclasses.dataclass(frozen=True)
class RecalibOptions:
  """FORGE_RECALIB's options, validated where made (rules: SPEC.md "Options").

  Exactly one of `momentum` (fixed EMA rate in [0, 1]) and `window` (rate
  min(1, N / window) for a batch of N) is set. Float fields hold the float32 value
  the op uses, so encoding and decoding round-trip exactly. Each field's metadata
  "help" is its command-line help; a field without it (activation: it comes from
  the model) has no flag.
  """
  momentum: float | None = dataclasses.field(
      default=None, metadata=_help("Fixed EMA momentum in [0, 1] (instead of --window)."))
  window: int | None = dataclasses.field(
      default=None, metadata=_help("EMA window W: momentum = min(1, batch/W)."))
  eps: float = dataclasses.field(
      default=DEFAULT_EPS, metadata=_help("FORGE epsilon added to the variance."))
  activation: str = "none"
  variance: str = dataclasses.field(
      default="running", metadata=_help(f"Variance estimator: {', '.join(VARIANCES)}."))
  # SPEC "Integer arithmetic": "int" runs the op in fixed point (no float operation);
  # None (the C default, "float"): the float32 SPEC.
  arithmetic: str | None = dataclasses.field(
      default=None, metadata=_help(
          f"FORGE arithmetic: {', '.join(ARITHMETICS)} (float32 SPEC by default; int:"
          " fixed-point state and quantized multipliers, SPEC \"Integer arithmetic\")."))
  # SPEC "Adapt-safe mode": the op adapts in mode adapt_safe (the field controller's mode while
  # the stream's labels look correlated), else runs source mode there; None (0 in
  # the C struct): not label-safe. Set by the converter per site.
  label_safe: int | None = None

  def __post_init__(self):
    if (self.momentum is None) == (self.window is None):
      raise ValueError("exactly one of momentum or window must be set")
    if self.momentum is not None:
      if not _is_real(self.momentum):
        raise ValueError("momentum must be a number")
      m = _to_float32(self.momentum)
      if m is None or not 0.0 <= m <= 1.0:
        raise ValueError("momentum must be a number in [0, 1]")
      object.__setattr__(self, "momentum", float(m))
    else:
      if not isinstance(self.window, numbers.Integral) or isinstance(
          self.window, (bool, np.bool_)):
        raise ValueError("window must be an integer")
      if not 1 <= int(self.window) <= _INT32_MAX:
        raise ValueError("window must be in [1, 2^31-1]")
      object.__setattr__(self, "window", int(self.window))
    if not _is_real(self.eps):
      raise ValueError("eps must be a number")
    eps = _to_float32(self.eps)
    if eps is None or not eps > 0:
      raise ValueError("eps must be finite and > 0")
    object.__setattr__(self, "eps", float(eps))
    if self.activation not in ACTIVATIONS:
      raise ValueError(f"unknown activation {self.activation!r} (one of"
                       f" {', '.join(ACTIVATIONS)})")
    if self.variance not in VARIANCES:
      raise ValueError(f"unknown variance estimator {self.variance!r} (one of"
                       f" {', '.join(VARIANCES)})")
    if self.arithmetic is not None:
      if self.arithmetic not in ARITHMETICS:
        raise ValueError(f"unknown arithmetic {self.arithmetic!r} (one of"
                         f" {', '.join(ARITHMETICS)})")
      if self.arithmetic == ARITHMETICS[0]:  # The C default: float.
        object.__setattr__(self, "arithmetic", None)
    if self.label_safe is not None:
      if self.label_safe not in (0, 1) or isinstance(self.label_safe, float):
        raise ValueError("label_safe must be 0 or 1")
      object.__setattr__(self, "label_safe", 1 if self.label_safe else None)

  @property
  def integer(self) -> bool:
    """The integer arithmetic (SPEC "Integer arithmetic")."""
    return self.arithmetic == "int"

  @property
  def use_window(self) -> bool:
    return self.window is not None

  def momentum_at(self, batch: int) -> np.float32:
    """The EMA rate for a batch of `batch` images (SPEC step 3)."""
    return momentum_rule(self.momentum, self.window, batch)

  def replace(self, **changes) -> "RecalibOptions":
    """A copy with `changes`; setting momentum clears window and vice versa.

    Setting both at once is an error (they are two spellings of one rate).
    """
    changes = {k: v for k, v in changes.items() if v is not None}
    if "momentum" in changes and "window" in changes:
      raise ValueError("set at most one of momentum and window")
    if "momentum" in changes:
      changes["window"] = None
    elif "window" in changes:
      changes["momentum"] = None
    return dataclasses.replace(self, **changes)

  def to_json(self) -> dict:
    """The set fields, by name (the manifest's per-site options)."""
    return {name: getattr(self, name) for name, _ in OPTION_FIELDS
            if getattr(self, name) is not None}

  @classmethod
  def from_json(cls, data: dict) -> "RecalibOptions":
    unknown = set(data) - {name for name, _ in OPTION_FIELDS}
    if unknown:
      raise ValueError(f"unknown FORGE option(s) {', '.join(sorted(unknown))}")
    return cls(**data)


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(RecalibOptions))
if _FIELD_NAMES != tuple(name for name, _ in OPTION_FIELDS):
  raise ImportError(f"RecalibOptions fields {_FIELD_NAMES} differ from the C core's"
                    f" {OPTION_FIELDS}: rebuild the extension")

FLAG_FIELDS = tuple(f for f in dataclasses.fields(RecalibOptions) if "help" in f.metadata)
# The values each enum kind of OPTION_FIELDS takes.
ENUM_VALUES = {"ACTIVATION": tuple(ACTIVATIONS), "VARIANCE": VARIANCES,
               "ARITHMETIC": ARITHMETICS}


def encode_options(opts: RecalibOptions) -> bytes:
  """Flexbuffer map with every set field written explicitly (custom_options)."""
  fbb = flexbuffers.Builder()
  with fbb.Map():
    for name, kind in OPTION_FIELDS:
      value = getattr(opts, name)
      if value is None:
        continue
      fbb.Key(name)
      if kind == "FLOAT":
        fbb.Float(value)
      elif kind == "INT":
        fbb.Int(value)
      else:
        fbb.String(value)
  return bytes(fbb.Finish())


def _read_value(key: str, kind: str, ref):
  if kind == "FLOAT":
    if not ref.IsFloat:
      raise ValueError(f"option {key!r} must be a float")
    return _float_value(ref)
  if kind == "INT":
    if not ref.IsInt:
      raise ValueError(f"option {key!r} must be an integer")
    return int(ref.AsInt)
  if not ref.IsString:
    raise ValueError(f"option {key!r} must be a string")
  return ref.AsString


def _float_value(ref) -> float:
  """A flexbuffer float as the C++ parser reads it: 4- and 8-byte IEEE floats as they
  are, 1- and 2-byte ones as int8 / int16 (flexbuffers' ReadDouble; the Python library
  has no such widths)."""
  if ref._type is flexbuffers.Type.INDIRECT_FLOAT:
    raw, width = ref._Indirect(), ref._byte_width
  else:
    raw, width = ref._Bytes, ref._parent_width
  if width in (1, 2):
    return float(int.from_bytes(bytes(raw[:width]), "little", signed=True))
  return float(ref.AsFloat)


# flexbuffers type codes (flexbuffers.h) of the values an option can take.
_FBT_INT, _FBT_UINT, _FBT_FLOAT, _FBT_STRING = 1, 2, 3, 5
_FBT_INDIRECT = (6, 7, 8)  # INDIRECT_INT, INDIRECT_UINT, INDIRECT_FLOAT
_FBT_MAP, _FBT_MAX_TYPE = 9, 37
_WIDTHS = (1, 2, 4, 8)


def _uint(buf: bytes, at: int, width: int) -> int:
  return int.from_bytes(buf[at:at + width], "little")


def _layout_error(what: str) -> ValueError:
  return ValueError(f"malformed flexbuffer options: {what}")


def _check_root(buf: bytes) -> tuple[int, int]:
  """(map position, map width); PrecheckLayout of forge_recalib_options.cc.

  The C++ parser copies the options to an 8-byte aligned buffer and requires the
  root slot, the map and its key vector naturally aligned relative to its start.
  """
  n = len(buf)
  if n < 3:
    raise _layout_error("too short")
  root_width, packed = buf[-1], buf[-2]
  if root_width not in _WIDTHS or n - 2 < root_width:
    raise _layout_error("bad root width")
  root_pos = n - 2 - root_width
  if root_pos % root_width:
    raise _layout_error("misaligned root")
  if packed >> 2 != _FBT_MAP:
    raise ValueError("options must be a flexbuffer map")
  map_off = _uint(buf, root_pos, root_width)
  if map_off > root_pos:
    raise _layout_error("bad map offset")
  map_pos, width = root_pos - map_off, 1 << (packed & 3)
  if map_pos % width or map_pos < 3 * width:
    raise _layout_error("bad map layout")
  keys_field = map_pos - 3 * width
  keys_off, key_width = _uint(buf, keys_field, width), _uint(buf, keys_field + width, width)
  if keys_off > keys_field or key_width not in _WIDTHS or (
      keys_field - keys_off) % key_width:
    raise _layout_error("bad key vector")
  return map_pos, width


def _in_buffer(buf: bytes, at: int, length: int) -> bool:
  """flexbuffers' Verifier::VerifyFrom (note: length < size, strictly)."""
  return 0 <= at and length < len(buf) and at <= len(buf) - length


def _vector(buf: bytes, at: int, width: int, elem_width: int) -> int | None:
  """Element count of the vector at `at`, or None if flexbuffers' verifier refuses
  its size field or its elements' bytes."""
  if width > at:
    return None
  count = _uint(buf, at - width, width)
  return count if _in_buffer(buf, at, count * elem_width) else None


def _target(buf: bytes, at: int, parent_width: int) -> int | None:
  """Where the offset at `at` points (the verifier's VerifyOffset), or None."""
  off = _uint(buf, at, parent_width)
  return at - off if off <= len(buf) and off <= at else None


def _value_verifies(buf: bytes, at: int, parent_width: int, packed: int) -> bool:
  """flexbuffers' Verifier::VerifyRef for the types an option value can have;
  any other type is refused by the decoder anyway."""
  kind, width = packed >> 2, 1 << (packed & 3)
  if kind >= _FBT_MAX_TYPE:
    return False
  if kind in (_FBT_INT, _FBT_UINT, _FBT_FLOAT):
    return True  # Inline.
  if kind not in _FBT_INDIRECT and kind != _FBT_STRING:
    return True
  p = _target(buf, at, parent_width)
  if p is None or p % width:
    return False
  if kind != _FBT_STRING:
    return _in_buffer(buf, p, width)
  size = _vector(buf, p, width, 1)
  return size is not None and _in_buffer(buf, p, size + 1)  # + its terminator


def _keys_verify(buf: bytes, map_pos: int, width: int) -> bool:
  """flexbuffers' Verifier::VerifyKeys: the key vector and each key's offset; a
  key needs a non-zero byte at or after it (the verifier's own rule)."""
  field = map_pos - 3 * width
  keys = _target(buf, field, width)
  if keys is None:
    return False
  key_width = _uint(buf, field + width, width)  # One of _WIDTHS (_check_root).
  count = _vector(buf, keys, key_width, key_width)
  if count is None:
    return False
  for i in range(count):
    key = _target(buf, keys + i * key_width, key_width)
    if key is None or not any(buf[key:]):
      return False
  return True


def _verify(buf: bytes) -> None:
  """The checks the C++ parser makes before reading a value (its layout pre-check,
  then flexbuffers::VerifyBuffer), so that the host refuses every buffer the device
  refuses; the option cross-check (forge_tflm/testing/options_crosscheck.py) holds
  the two to the same verdicts."""
  map_pos, width = _check_root(buf)
  count = _vector(buf, map_pos, width, width)
  if count is None or not _in_buffer(buf, map_pos + count * width, count):
    raise _layout_error("verification failed")
  types = map_pos + count * width
  if not all(_value_verifies(buf, map_pos + i * width, width, buf[types + i])
             for i in range(count)) or not _keys_verify(buf, map_pos, width):
    raise _layout_error("verification failed")


def decode_options(data: bytes) -> RecalibOptions:
  """Parses custom_options with the rules of the C++ parser; ValueError if bad.

  Only the root map and its scalar/string values are read, so a hostile buffer
  cannot make this recurse.
  """
  data = bytes(data)
  if len(data) > MAX_OPTIONS_BYTES:
    raise ValueError(f"options larger than {MAX_OPTIONS_BYTES} bytes")
  _verify(data)
  kinds = dict(OPTION_FIELDS)
  try:
    root = flexbuffers.GetRoot(data)
    if not root.IsMap:
      raise ValueError("options must be a flexbuffer map")
    fmap = root.AsMap
    keys = [k.AsKey for k in fmap.Keys]
    values = list(fmap.Values)
  except ValueError:
    raise
  except Exception as e:  # Malformed bytes surface as many exception types.
    raise ValueError(f"malformed flexbuffer options: {type(e).__name__}") from e
  if len(keys) != len(values):
    raise ValueError("malformed flexbuffer options: key/value count mismatch")
  kwargs = {}
  for key, ref in zip(keys, values):
    if key not in kinds:
      raise ValueError(f"unknown option key {key!r}")
    if key in kwargs:
      raise ValueError(f"duplicate option key {key!r}")
    try:
      kwargs[key] = _read_value(key, kinds[key], ref)
    except ValueError:
      raise
    except Exception as e:
      raise ValueError(f"malformed flexbuffer options: {type(e).__name__}") from e
  return RecalibOptions(**kwargs)
