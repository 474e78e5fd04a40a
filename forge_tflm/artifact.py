"""The deployable artifact: a FORGE `.tflite` and its manifest, typed, in one module.

The converter writes the manifest with `Manifest.to_json`; the evaluator, the runtime
and the firmware tools read it back with `Artifact.load` / `Manifest.from_json`. Each
FORGE site is recorded explicitly (name, operator index, tensors, options, bytes), so
nothing is parsed back out of tensor names.

Manifest JSON (schema 2):
  manifest_version, model_sha256, model_bytes, source {path, sha256, frontend},
  command, input {contract, quantization {scale, zero_point}, dtype},
  output {quantization, dtype}, calibration {...}, parity {...}, bn_sites_found [names],
  sites [{name, conv, kind, op_index, channels, bn_eps, options, input_tensor,
          output_tensor, input_quantization, output_quantization,
          preact_saturated_fraction, state_bytes, target_bytes, memory}],
  targets {source: recorded | measured, images} (absent: recorded),
  totals {sites, channels, state_bytes_sram, target_bytes_flash, memory}.
`memory` (derived, written for people and firmware budgets): per node and in total,
the arena bytes FORGE adds on a 32-bit TFLM target (state, op data, TFLM's node
bookkeeping) and its scratch (forge_tflm.ops.memory).

Reading one (`load_manifest`, issue 34) is one schema: strict JSON
(forge_tflm.fileio.load_json: no NaN / inf / huge numbers, nesting or repeated keys),
the types of every field here (`_Fields`, unknown fields refused), the values where
each dataclass is made (`__post_init__`), then every field the model states checked
against the model (model_check.check_manifest: channels, options, tensors,
quantization, kinds, sizes), then the derived fields against the rest. Each failure
is one ArtifactError line naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os

import numpy as np

from forge_tflm.errors import ArtifactError
from forge_tflm.ops import RecalibOptions
from forge_tflm.ops.memory import NodeMemory

SCHEMA_VERSION = 2
BYTES_PER_CHANNEL_TARGETS = 8  # beta, |gamma|: float32 each, const (flash).


# -- the manifest schema: one reader, every field's type and range ----------------------

_REQUIRED = object()
_INT32_MAX = 2**31 - 1
_MAX_CHANNELS = 65536  # The op's channel limit (forge_recalib.h FORGE_RECALIB_MAX_C).
_TOP_LEVEL = ("manifest_version", "model_sha256", "model_bytes", "source", "command",
              "input", "output", "calibration", "bn_sites_found", "sites", "parity",
              "targets", "totals")
_SITE_KEYS = ("name", "conv", "kind", "op_index", "channels", "bn_eps", "options",
              "input_tensor", "output_tensor", "input_quantization",
              "output_quantization", "preact_saturated_fraction", "state_bytes",
              "target_bytes", "memory")
SITE_KINDS = ("conv", "depthwise")
TARGET_SOURCES = ("recorded", "measured")


def _check(ok: bool, msg: str) -> None:
  if not ok:
    raise ValueError(msg)


def _is_int(v) -> bool:
  return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_finite(v) -> bool:
  return isinstance(v, (int, float, np.number)) and not isinstance(
      v, (bool, np.bool_)) and math.isfinite(v)


def _json_type(v) -> str:
  if isinstance(v, bool):
    return "a boolean"
  return {int: "an integer", float: "a number", str: "a string", list: "a list",
          dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)


class _Fields:
  """One JSON object of the manifest, read field by field: each accessor checks the
  field's type and range and, when it fails, names the field by its path
  ("sites[2].channels") in a one-line ArtifactError."""

  def __init__(self, data, where: str, keys=None):
    self.where = where
    if not isinstance(data, dict):
      raise ArtifactError(f"{'field ' + where if where else 'the manifest'}: must be an"
                          f" object, not {_json_type(data)}")
    self.data = data
    unknown = [k for k in data if keys is not None and k not in keys]
    if unknown:
      self.fail(unknown[0], "unknown field")

  def path(self, key) -> str:
    key = key if isinstance(key, str) and len(key) < 60 else repr(key)[:60]
    return f"{self.where}.{key}" if self.where else key

  def fail(self, key, msg: str):
    raise ArtifactError(" ".join(f"field {self.path(key)}: {msg}".split()))

  def get(self, key, default=_REQUIRED):
    if key not in self.data:
      if default is _REQUIRED:
        self.fail(key, "missing")
      return default
    return self.data[key]

  def str(self, key, default=_REQUIRED, empty=False) -> str:
    v = self.get(key, default)
    if v is not default and (not isinstance(v, str) or not (v or empty)):
      self.fail(key, f"must be a{'' if empty else ' non-empty'} string, not"
                f" {_json_type(v) if v != '' else 'empty'}")
    return v

  def int(self, key, default=_REQUIRED) -> int:
    v = self.get(key, default)
    if v is not default and (not isinstance(v, int) or isinstance(v, bool)):
      self.fail(key, f"must be an integer, not {_json_type(v)}")
    return v

  def float(self, key) -> float:
    v = self.get(key)  # load_json has refused NaN, inf and out-of-range numbers.
    if not isinstance(v, (int, float)) or isinstance(v, bool):
      self.fail(key, f"must be a number, not {_json_type(v)}")
    return float(v)

  def make(self, cls, **kwargs):
    """cls(**kwargs): its own checks (ranges) failing name this object."""
    try:
      return cls(**kwargs)
    except ArtifactError:
      raise
    except (TypeError, ValueError) as e:
      where = f"field {self.where}: " if self.where else ""
      raise ArtifactError(" ".join(f"{where}{e}".split())) from None

  def obj(self, key, keys=None, default=_REQUIRED) -> "_Fields":
    return _Fields(self.get(key, default), self.path(key), keys)

  def list(self, key, default=_REQUIRED) -> list:
    v = self.get(key, default)
    if not isinstance(v, list):
      self.fail(key, f"must be a list, not {_json_type(v)}")
    return v

  def names(self, key) -> tuple[str, ...]:
    """A list of distinct non-empty strings."""
    items = self.list(key)
    for i, v in enumerate(items):
      if not isinstance(v, str) or not v:
        self.fail(f"{key}[{i}]", f"must be a non-empty string, not {_json_type(v)}")
    if len(set(items)) != len(items):
      twice = next(v for v in items if items.count(v) > 1)
      self.fail(key, f"names {twice[:60]!r} twice")
    return tuple(items)

  def each(self, key, keys=None):
    return [_Fields(v, f"{self.path(key)}[{i}]", keys)
            for i, v in enumerate(self.list(key))]


@dataclasses.dataclass(frozen=True)
class InputContract:
  """How uint8 pixels become the float input the model was trained on.

  kind "range": x = low + pixel / 255 * (high - low).
  kind "normalize": x = (pixel / 255 - mean[c]) / std[c].
  """

  kind: str = "range"
  low: float = 0.0
  high: float = 1.0
  mean: tuple[float, ...] = ()
  std: tuple[float, ...] = ()

  def __post_init__(self):
    if self.kind == "range":
      _check(_is_finite(self.low) and _is_finite(self.high),
             f"input range [{self.low}, {self.high}] must be finite")
      if not self.high > self.low:
        raise ValueError(f"input range needs high > low, got [{self.low}, {self.high}]")
    elif self.kind == "normalize":
      if len(self.mean) != len(self.std) or not self.mean:
        raise ValueError("normalize needs mean and std of the same (non-zero) length")
      _check(all(map(_is_finite, self.mean + self.std)), "mean and std must be finite")
      if any(s <= 0 for s in self.std):
        raise ValueError("normalize std must be > 0")
    else:
      raise ValueError(f"input contract kind must be 'range' or 'normalize', not {self.kind!r}")

  def to_float(self, pixels: np.ndarray) -> np.ndarray:
    x = np.asarray(pixels, np.float32) / np.float32(255.0)
    if self.kind == "range":
      return (np.float32(self.low) + x * np.float32(self.high - self.low)).astype(np.float32)
    return ((x - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
            ).astype(np.float32)

  def describe(self) -> str:
    """The contract as the convert flags that set it."""
    if self.kind == "range":
      return f"--input_range={self.low:g},{self.high:g}"
    return (f"--input_mean={','.join(f'{v:g}' for v in self.mean)} "
            f"--input_std={','.join(f'{v:g}' for v in self.std)}")

  def to_json(self) -> dict:
    if self.kind == "range":
      return {"kind": "range", "low": self.low, "high": self.high,
              "pixel_to_float": "low + pixel/255*(high-low)"}
    return {"kind": "normalize", "mean": list(self.mean), "std": list(self.std),
            "pixel_to_float": "(pixel/255 - mean[c]) / std[c]"}

  @classmethod
  def from_json(cls, f: "_Fields") -> "InputContract":
    kind = f.str("kind")
    if kind == "range":
      f = _Fields(f.data, f.where, ("kind", "low", "high", "pixel_to_float"))
      return f.make(cls, kind=kind, low=f.float("low"), high=f.float("high"))
    f = _Fields(f.data, f.where, ("kind", "mean", "std", "pixel_to_float"))
    mean, std = f.list("mean"), f.list("std")
    for key, values in (("mean", mean), ("std", std)):
      for i, v in enumerate(values):
        if not _is_finite(v):
          f.fail(f"{key}[{i}]", f"must be a number, not {_json_type(v)}")
    return f.make(cls, kind=kind, mean=tuple(map(float, mean)),
                  std=tuple(map(float, std)))


@dataclasses.dataclass(frozen=True)
class TensorQuant:
  """Per-tensor int8 quantization: real = scale * (q - zero_point)."""
  scale: float
  zero_point: int

  def __post_init__(self):
    _check(_is_finite(self.scale) and self.scale > 0,
           f"scale must be a finite number > 0, not {self.scale}")
    _check(_is_int(self.zero_point) and -128 <= self.zero_point <= 127,
           f"zero_point must be an int8 integer in [-128, 127], not {self.zero_point}")

  def to_json(self) -> dict:
    return {"scale": self.scale, "zero_point": self.zero_point}

  @classmethod
  def from_json(cls, f: "_Fields") -> "TensorQuant":
    f = _Fields(f.data, f.where, ("scale", "zero_point"))
    return f.make(cls, scale=f.float("scale"), zero_point=f.int("zero_point"))

  def same_as(self, scale: float, zero_point: int) -> bool:
    """Equal to the model's (float32) scale and zero point."""
    return np.float32(self.scale) == np.float32(scale) and self.zero_point == zero_point


@dataclasses.dataclass(frozen=True)
class SiteRecord:
  """One FORGE_RECALIB node of the artifact and the Conv->BN site it adapts."""
  name: str             # The BN layer's path in the source model.
  conv: str             # The convolution feeding that BN.
  kind: str             # "conv" or "depthwise".
  op_index: int         # The FORGE_RECALIB operator's index in subgraph 0.
  channels: int
  bn_eps: float
  options: RecalibOptions
  input_tensor: str     # The conv's (pre-activation) output, FORGE's input.
  output_tensor: str
  input_quant: TensorQuant
  output_quant: TensorQuant
  preact_saturated_fraction: float

  def __post_init__(self):
    for name in ("name", "conv", "input_tensor", "output_tensor"):
      _check(isinstance(getattr(self, name), str) and getattr(self, name),
             f"{name} must be a non-empty string")
    _check(self.kind in SITE_KINDS, f"kind must be one of {', '.join(SITE_KINDS)},"
           f" not {self.kind!r}")
    _check(_is_int(self.op_index) and 0 <= self.op_index <= _INT32_MAX,
           f"op_index must be an integer in [0, 2^31 - 1], not {self.op_index}")
    _check(_is_int(self.channels) and 1 <= self.channels <= _MAX_CHANNELS,
           f"channels must be an integer in [1, {_MAX_CHANNELS}], not {self.channels}")
    # A BN epsilon is 1e-5..1e-3 in practice; 1 is far beyond any trained BN.
    _check(_is_finite(self.bn_eps) and 0 < self.bn_eps <= 1,
           f"bn_eps must be a finite number in (0, 1], not {self.bn_eps}")
    _check(_is_finite(self.preact_saturated_fraction)
           and 0 <= self.preact_saturated_fraction <= 1,
           "preact_saturated_fraction must be a finite number in [0, 1], not"
           f" {self.preact_saturated_fraction}")
    _check(isinstance(self.options, RecalibOptions), "options must be RecalibOptions")

  @property
  def state_bytes(self) -> int:
    return self.memory.state

  @property
  def target_bytes(self) -> int:
    """Flash constants: the targets (beta, |gamma|)."""
    return BYTES_PER_CHANNEL_TARGETS * self.channels

  @property
  def memory(self) -> NodeMemory:
    return NodeMemory(self.channels)

  def to_json(self) -> dict:
    return {"name": self.name, "conv": self.conv, "kind": self.kind,
            "op_index": self.op_index, "channels": self.channels, "bn_eps": self.bn_eps,
            "options": self.options.to_json(), "input_tensor": self.input_tensor,
            "output_tensor": self.output_tensor,
            "input_quantization": self.input_quant.to_json(),
            "output_quantization": self.output_quant.to_json(),
            "preact_saturated_fraction": self.preact_saturated_fraction,
            "state_bytes": self.state_bytes, "target_bytes": self.target_bytes,
            "memory": self.memory.to_json()}

  @classmethod
  def from_json(cls, f: "_Fields") -> "SiteRecord":
    options = f.obj("options")
    try:
      recalib = RecalibOptions.from_json(options.data)
    except (TypeError, ValueError) as e:
      f.fail("options", str(e))
    return f.make(cls, name=f.str("name"), conv=f.str("conv"), kind=f.str("kind"),
                  op_index=f.int("op_index"), channels=f.int("channels"),
                  bn_eps=f.float("bn_eps"), options=recalib,
                  input_tensor=f.str("input_tensor"), output_tensor=f.str("output_tensor"),
                  input_quant=TensorQuant.from_json(f.obj("input_quantization")),
                  output_quant=TensorQuant.from_json(f.obj("output_quantization")),
                  preact_saturated_fraction=f.float("preact_saturated_fraction"))


def _derived(f: "_Fields", written: dict, keys) -> None:
  """Fields written for people and firmware budgets (derived): absent, or exactly
  what the rest of the manifest gives."""
  for key in keys:
    if key in f.data:
      where, got, want = _first_difference(key, f.data[key], written[key])
      if where is not None:
        f.fail(where, f"is {json.dumps(got)[:60]}, but the manifest's sites give"
               f" {json.dumps(want)[:60]} (written by another forge_tflm version?"
               " convert the model again)")


def _first_difference(key: str, got, want):
  """(path, got, want) of the first value where `got` differs from `want` (ours, a
  few levels deep); (None, ..) when equal."""
  if isinstance(want, dict) and isinstance(got, dict) and set(got) == set(want):
    for k in want:
      found = _first_difference(f"{key}.{k}", got[k], want[k])
      if found[0] is not None:
        return found
    return None, got, want
  same = type(got) is type(want) and got == want
  return (None if same else key), got, want


@dataclasses.dataclass(frozen=True)
class Manifest:
  """What `forge_tflm convert` recorded about one `.tflite`."""
  model_sha256: str
  model_bytes: int
  source: dict          # {"path", "sha256", "frontend"}
  command: str
  input_contract: InputContract
  input_quant: TensorQuant
  output_quant: TensorQuant
  calibration: dict     # {"images", "source", "seed", "preact_range"}
  bn_sites_found: tuple[str, ...]
  sites: tuple[SiteRecord, ...]
  # The converter's parity gate (converter/parity.py): float model vs source, int8 vs
  # float; {} in manifests written before it existed.
  parity: dict = dataclasses.field(default_factory=dict)
  # Where FORGE's clean targets came from: {"source": "recorded"} (the BN's beta and
  # |gamma| at fold time) or {"source": "measured", "images": N} (an int8 .tflite's
  # pre-activation moments on N clean calibration images); absent before: recorded.
  targets: dict = dataclasses.field(default_factory=lambda: {"source": "recorded"})

  def __post_init__(self):
    _check(isinstance(self.model_sha256, str) and len(self.model_sha256) == 64
           and all(c in "0123456789abcdef" for c in self.model_sha256),
           "model_sha256 must be 64 lowercase hex digits")
    _check(_is_int(self.model_bytes) and 1 <= self.model_bytes <= _INT32_MAX,
           f"model_bytes must be an integer in [1, 2^31 - 1], not {self.model_bytes}")
    for name in ("source", "calibration", "parity", "targets"):
      _check(isinstance(getattr(self, name), dict), f"{name} must be a dict")
    _check(isinstance(self.command, str), "command must be a string")
    _check(all(isinstance(n, str) and n for n in self.bn_sites_found)
           and len(set(self.bn_sites_found)) == len(self.bn_sites_found),
           "bn_sites_found must be distinct non-empty names")
    names = [s.name for s in self.sites]
    _check(len(set(names)) == len(names),
           f"sites: name {next((n for n in names if names.count(n) > 1), '')!r} twice")
    order = [s.op_index for s in self.sites]
    _check(order == sorted(set(order)), f"sites must be in the model's operator order"
           f" (each op once), not ops {order[:8]}")
    unfound = [n for n in names if n not in self.bn_sites_found]
    _check(not unfound, f"site {unfound[:1]} is not among bn_sites_found")
    _check_targets(self.targets)
    _check_contract_fits(self.input_contract, self.input_quant)

  @property
  def channels(self) -> int:
    return sum(s.channels for s in self.sites)

  @property
  def state_bytes(self) -> int:
    """FORGE's running statistics: SRAM, 8 B per adapted channel."""
    return sum(s.state_bytes for s in self.sites)

  @property
  def target_bytes(self) -> int:
    """The clean targets (beta, |gamma|): flash, 8 B per adapted channel."""
    return sum(s.target_bytes for s in self.sites)

  def memory_json(self) -> dict:
    """FORGE's arena bytes on a 32-bit TFLM target (persistent: added to the arena;
    scratch: the largest request, overlapping other ops' buffers, so it adds only
    where it exceeds the model's own peak) and its flash for the targets."""
    nodes = [s.memory for s in self.sites]
    return {"state_bytes_sram": sum(m.state for m in nodes),
            "op_data_bytes_32bit": sum(m.op_data for m in nodes),
            "tflm_node_bytes_32bit": sum(m.tflm_node for m in nodes),
            "arena_added_bytes_32bit": sum(m.persistent_arena for m in nodes),
            "scratch_bytes_peak": max((m.scratch_table for m in nodes), default=0),
            "target_bytes_flash": self.target_bytes}

  def site(self, name: str) -> SiteRecord:
    for s in self.sites:
      if s.name == name:
        return s
    raise KeyError(f"no FORGE site {name!r} (sites: {', '.join(s.name for s in self.sites)})")

  def to_json(self) -> dict:
    return {
        "manifest_version": SCHEMA_VERSION,
        "model_sha256": self.model_sha256,
        "model_bytes": self.model_bytes,
        "source": dict(self.source),
        "command": self.command,
        "input": {"contract": self.input_contract.to_json(),
                  "quantization": self.input_quant.to_json(), "dtype": "int8"},
        "output": {"quantization": self.output_quant.to_json(), "dtype": "int8"},
        "calibration": dict(self.calibration),
        "bn_sites_found": list(self.bn_sites_found),
        "sites": [s.to_json() for s in self.sites],
        "parity": dict(self.parity),
        "targets": dict(self.targets),
        "totals": {"sites": len(self.sites), "channels": self.channels,
                   "state_bytes_sram": self.state_bytes,
                   "target_bytes_flash": self.target_bytes,
                   "memory": self.memory_json()},
    }

  def dumps(self) -> bytes:
    return (json.dumps(self.to_json(), indent=2) + "\n").encode()

  @classmethod
  def from_json(cls, d) -> "Manifest":
    """The manifest of JSON `d`, every field checked (types here, values by the
    dataclasses); ArtifactError naming the field otherwise. What the model states
    (channels, options, tensors, quantization) is checked by Artifact.load."""
    version = d.get("manifest_version") if isinstance(d, dict) else None
    if type(version) is not int or version != SCHEMA_VERSION:
      raise ArtifactError(f"manifest version {str(version)[:20]} is not {SCHEMA_VERSION},"
                          " the one this forge_tflm reads: re-run forge_tflm convert")
    f = _Fields(d, "", _TOP_LEVEL)
    io = {k: f.obj(k, keys) for k, keys in (("input", ("contract", "quantization", "dtype")),
                                            ("output", ("quantization", "dtype")))}
    for part in io.values():
      if part.str("dtype") != "int8":
        part.fail("dtype", f"must be 'int8', not {part.data['dtype'][:20]!r}")
    source = f.obj("source")
    for key in ("path", "sha256", "frontend"):
      source.str(key, empty=True)
    targets = f.obj("targets", ("source", "images"), default={"source": "recorded"})
    manifest = f.make(
        cls, model_sha256=f.str("model_sha256"), model_bytes=f.int("model_bytes"),
        source=dict(source.data), command=f.str("command", empty=True),
        input_contract=InputContract.from_json(io["input"].obj("contract")),
        input_quant=TensorQuant.from_json(io["input"].obj("quantization")),
        output_quant=TensorQuant.from_json(io["output"].obj("quantization")),
        calibration=dict(f.obj("calibration").data), bn_sites_found=f.names("bn_sites_found"),
        sites=tuple(SiteRecord.from_json(s) for s in f.each("sites", _SITE_KEYS)),
        parity=dict(f.obj("parity", default={}).data),
        targets={"source": targets.str("source"),
                 **({"images": targets.int("images")} if "images" in targets.data else {})})
    return manifest

  def check_derived(self, d: dict) -> None:
    """The fields derived from the others (memory, bytes, totals: written for people
    and firmware budgets) are absent from JSON `d` or exactly what this manifest
    gives; checked after the model's checks, whose messages say more."""
    f, written = _Fields(d, ""), self.to_json()
    for k, (site, ours) in enumerate(zip(f.each("sites"), written["sites"])):
      _derived(site, ours, ("state_bytes", "target_bytes", "memory"))
    _derived(f, written, ("totals",))


def _check_targets(targets: dict) -> None:
  """{"source": "recorded"} or {"source": "measured", "images": N >= 1}."""
  source, images = targets.get("source"), targets.get("images")
  _check(source in TARGET_SOURCES and set(targets) <= {"source", "images"},
         f"targets must be {{'source': one of {', '.join(TARGET_SOURCES)}}}")
  if source == "measured" or images is not None:
    _check(_is_int(images) and 1 <= images <= _INT32_MAX,
           f"targets: images must be an integer >= 1 with source {source!r}, not {images}")


# convert quantizes the input for the calibration floats' range; a contract whose floats
# fall this far outside it (a fraction of the range), or span this little of it, is not
# the one the model was converted with (pixels 0..255 for a 0..1 model saturate).
_CONTRACT_OUTSIDE = 0.25
_CONTRACT_NARROW = 1 / 16


def _check_contract_fits(contract: InputContract, quant: TensorQuant) -> None:
  if contract.kind == "range":
    low, high = contract.low, contract.high
  else:
    ends = [((0.0 - m) / s, (1.0 - m) / s) for m, s in zip(contract.mean, contract.std)]
    low, high = min(e[0] for e in ends), max(e[1] for e in ends)
  q_low, q_high = quant.scale * (-128 - quant.zero_point), quant.scale * (127 - quant.zero_point)
  span = q_high - q_low
  outside = max(q_low - low, 0.0) + max(high - q_high, 0.0)
  _check(outside <= _CONTRACT_OUTSIDE * span and high - low >= _CONTRACT_NARROW * span,
         f"input contract {contract.describe()} gives floats in [{low:.4g}, {high:.4g}], but"
         f" the model's input is quantized for [{q_low:.4g}, {q_high:.4g}]: not the"
         " contract the model was converted with")


def manifest_path(tflite_path: str) -> str:
  """Where `convert` puts the manifest of `tflite_path`: the same stem, .json."""
  return os.path.splitext(tflite_path)[0] + ".json"


@dataclasses.dataclass(frozen=True)
class Artifact:
  """A `.tflite` and, when it has one, its manifest (checked to describe it)."""
  path: str
  model: bytes
  manifest: Manifest | None

  @property
  def sha256(self) -> str:
    return hashlib.sha256(self.model).hexdigest()

  @property
  def input_contract(self) -> InputContract:
    """Pixels -> float input; without a manifest, pixels / 255 (the default)."""
    return self.manifest.input_contract if self.manifest else InputContract()

  @property
  def site_names(self) -> dict[int, str]:
    """FORGE operator index -> site name."""
    return {s.op_index: s.name for s in self.manifest.sites} if self.manifest else {}

  @classmethod
  def load(cls, path: str, require_manifest: bool = False) -> "Artifact":
    """Reads `path` and its manifest; the model is validated first
    (forge_tflm.model_check: a malformed file raises ModelCheckError, an
    ArtifactError, naming the operator and tensor)."""
    from forge_tflm.model_check import check_model

    if os.path.splitext(path)[1].lower() in (".keras", ".h5", ".onnx"):
      raise ArtifactError(f"{path} is a float model, not a FORGE artifact: convert it"
                          f" first (forge_tflm convert --model={path} --output=X.tflite)"
                          " and pass X.tflite")
    with open(path, "rb") as f:
      model = f.read()
    parsed = check_model(model, path)
    mpath = manifest_path(path)
    manifest = None
    if os.path.exists(mpath):
      manifest = load_manifest(mpath, model, parsed)
    elif require_manifest:
      raise ArtifactError(f"{path} has no manifest ({mpath}): convert it with"
                          " forge_tflm convert")
    return cls(path, model, manifest)


def load_manifest(mpath: str, model: bytes, parsed) -> Manifest:
  """The manifest in file `mpath` of `model` (`parsed`: check_model's result): strict
  JSON, the schema, then every field the model states checked against the model;
  one-line ArtifactError naming the file and the field otherwise."""
  from forge_tflm.fileio import JSONFileError, load_json
  from forge_tflm.model_check import check_manifest

  try:
    data = load_json(mpath)
    manifest = Manifest.from_json(data)
  except JSONFileError as e:
    raise ArtifactError(str(e)) from None
  except ArtifactError as e:
    raise ArtifactError(f"{mpath}: malformed manifest: {e}") from None
  if manifest.model_sha256 != hashlib.sha256(model).hexdigest():
    raise ArtifactError(f"manifest {mpath} is for another model (sha256 mismatch, as an"
                        " interrupted convert leaves them): run forge_tflm convert again")
  try:
    check_manifest(manifest, parsed, len(model))
  except ArtifactError as e:
    raise ArtifactError(f"{mpath}: manifest contradicts the model: {e}") from None
  try:
    manifest.check_derived(data)
  except ArtifactError as e:
    raise ArtifactError(f"{mpath}: malformed manifest: {e}") from None
  return manifest
