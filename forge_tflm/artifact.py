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
  totals {sites, channels, state_bytes_sram, target_bytes_flash, memory}.
`memory` (derived, written for people and firmware budgets, ignored on read): per node
and in total, the arena bytes FORGE adds on a 32-bit TFLM target (state, op data, TFLM's
node bookkeeping) and its scratch (forge_tflm.ops.memory).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import numpy as np

from forge_tflm.ops import RecalibOptions
from forge_tflm.ops.memory import NodeMemory

SCHEMA_VERSION = 2
BYTES_PER_CHANNEL_TARGETS = 8  # beta, |gamma|: float32 each, const (flash).


class ArtifactError(ValueError):
  """A model/manifest pair that cannot be used; the message is one line."""


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
      if not self.high > self.low:
        raise ValueError(f"input range needs high > low, got [{self.low}, {self.high}]")
    elif self.kind == "normalize":
      if len(self.mean) != len(self.std) or not self.mean:
        raise ValueError("normalize needs mean and std of the same (non-zero) length")
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

  def to_json(self) -> dict:
    if self.kind == "range":
      return {"kind": "range", "low": self.low, "high": self.high,
              "pixel_to_float": "low + pixel/255*(high-low)"}
    return {"kind": "normalize", "mean": list(self.mean), "std": list(self.std),
            "pixel_to_float": "(pixel/255 - mean[c]) / std[c]"}

  @classmethod
  def from_json(cls, data: dict) -> "InputContract":
    if data.get("kind") == "range":
      return cls("range", low=float(data["low"]), high=float(data["high"]))
    if data.get("kind") == "normalize":
      return cls("normalize", mean=tuple(float(v) for v in data["mean"]),
                 std=tuple(float(v) for v in data["std"]))
    raise ValueError(f"input contract kind must be 'range' or 'normalize', not"
                     f" {data.get('kind')!r}")


@dataclasses.dataclass(frozen=True)
class TensorQuant:
  """Per-tensor int8 quantization: real = scale * (q - zero_point)."""
  scale: float
  zero_point: int

  def to_json(self) -> dict:
    return {"scale": self.scale, "zero_point": self.zero_point}

  @classmethod
  def from_json(cls, data: dict) -> "TensorQuant":
    return cls(float(data["scale"]), int(data["zero_point"]))


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

  @property
  def state_bytes(self) -> int:
    return self.memory.state

  @property
  def target_bytes(self) -> int:
    """Flash constants: the targets, and the class offsets with class-balanced stats."""
    return BYTES_PER_CHANNEL_TARGETS * self.channels + self.memory.offsets_flash

  @property
  def memory(self) -> NodeMemory:
    return NodeMemory(self.channels, self.options.classes or 0)

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
  def from_json(cls, d: dict) -> "SiteRecord":
    return cls(name=d["name"], conv=d["conv"], kind=d["kind"], op_index=int(d["op_index"]),
               channels=int(d["channels"]), bn_eps=float(d["bn_eps"]),
               options=RecalibOptions.from_json(d["options"]),
               input_tensor=d["input_tensor"], output_tensor=d["output_tensor"],
               input_quant=TensorQuant.from_json(d["input_quantization"]),
               output_quant=TensorQuant.from_json(d["output_quantization"]),
               preact_saturated_fraction=float(d["preact_saturated_fraction"]))


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

  @property
  def channels(self) -> int:
    return sum(s.channels for s in self.sites)

  @property
  def state_bytes(self) -> int:
    """FORGE's running statistics: SRAM, 8 B per adapted channel (with K classes of
    class-balanced statistics at batch 1, 24 + 8 K per channel and 4 (K + 3) per op:
    forge_tflm.ops.memory)."""
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

  @property
  def class_balanced(self) -> bool:
    """Some site keeps class-balanced statistics (the label defence)."""
    return any(s.options.classes for s in self.sites)

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
        "totals": {"sites": len(self.sites), "channels": self.channels,
                   "state_bytes_sram": self.state_bytes,
                   "target_bytes_flash": self.target_bytes,
                   "memory": self.memory_json()},
    }

  def dumps(self) -> bytes:
    return (json.dumps(self.to_json(), indent=2) + "\n").encode()

  @classmethod
  def from_json(cls, d: dict) -> "Manifest":
    version = d.get("manifest_version") if isinstance(d, dict) else None
    if version != SCHEMA_VERSION:
      raise ArtifactError(f"manifest version {version} is not {SCHEMA_VERSION}, the one"
                          " this forge_tflm reads: re-run forge_tflm convert")
    try:
      return cls(model_sha256=d["model_sha256"], model_bytes=int(d["model_bytes"]),
                 source=dict(d["source"]), command=d["command"],
                 input_contract=InputContract.from_json(d["input"]["contract"]),
                 input_quant=TensorQuant.from_json(d["input"]["quantization"]),
                 output_quant=TensorQuant.from_json(d["output"]["quantization"]),
                 calibration=dict(d["calibration"]),
                 bn_sites_found=tuple(d["bn_sites_found"]),
                 sites=tuple(SiteRecord.from_json(s) for s in d["sites"]),
                 parity=dict(d.get("parity", {})))
    except ArtifactError:
      raise
    except (KeyError, TypeError, ValueError) as e:
      raise ArtifactError(f"malformed manifest: {type(e).__name__}: {e}") from e


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

    with open(path, "rb") as f:
      model = f.read()
    check_model(model, path)
    mpath = manifest_path(path)
    manifest = None
    if os.path.exists(mpath):
      try:
        with open(mpath) as f:
          data = json.load(f)
      except json.JSONDecodeError as e:
        raise ArtifactError(f"{mpath}: not JSON ({e})") from e
      except UnicodeDecodeError as e:
        raise ArtifactError(f"{mpath}: not JSON (not UTF-8 text)") from e
      try:
        manifest = Manifest.from_json(data)
      except ArtifactError as e:
        raise ArtifactError(f"{mpath}: {e}") from e
      if manifest.model_sha256 != hashlib.sha256(model).hexdigest():
        raise ArtifactError(f"manifest {mpath} is for another model (sha256 mismatch)")
    elif require_manifest:
      raise ArtifactError(f"{path} has no manifest ({mpath}): convert it with"
                          " forge_tflm convert")
    return cls(path, model, manifest)
