"""Parses the lines the application core prints (esp32s3_app/core/forge_app.h).

Lines that are not records (boot logs, MicroPrintf) are ignored, so a serial
console capture parses as it is.
"""

from __future__ import annotations

import dataclasses

import numpy as np

RECORDS = ("forge_app", "op", "mem", "img", "gate", "tensor", "cost", "cost_type", "done",
           "error")


def _fields(line: str) -> tuple[str, dict[str, str]] | None:
  parts = line.strip().split()
  if not parts or parts[0] not in RECORDS:
    return None
  fields = {}
  for p in parts[1:]:
    if "=" not in p:
      return None
    k, v = p.split("=", 1)
    fields[k] = v
  return parts[0], fields


@dataclasses.dataclass
class AppRun:
  header: dict
  ops: list[str]                  # op names in model order
  forge_ops: list[int]
  mem: dict[str, int]             # arena_size, arena_used, forge_persistent, forge_scratch
  logits: np.ndarray              # int8 [N, classes]
  predictions: np.ndarray         # [N]
  ticks: np.ndarray               # per image
  forge_checksums: np.ndarray | None  # uint32 [N, F]
  op_checksums: np.ndarray | None     # uint32 [N, K]
  state_checksums: np.ndarray | None  # uint32 [N, F]: FORGE state after each image
  cost: list[dict]                # per op: name, calls, ticks
  cost_type: dict[str, dict]      # name -> ops, ticks
  done: dict
  errors: list[dict]
  tensors: dict = dataclasses.field(default_factory=dict)  # (image, op) -> int8 [bytes]
  # The gate (mode=gated): per image the pass whose logits it printed
  # (source/adapt/frozen), and each probe's decision: image, on, score, autocorrelation
  # (the source path's and the adapting path's).
  paths: list = dataclasses.field(default_factory=list)
  gate_decisions: list = dataclasses.field(default_factory=list)
  malformed: list = dataclasses.field(default_factory=list)  # (line number, text)

  @property
  def clock_hz(self) -> int:
    return int(self.header.get("clock_hz", 0))

  @property
  def ok(self) -> bool:
    return self.done.get("status") == "ok" and not self.errors


def parse_app_output(text: str) -> AppRun:
  """Parses a captured log; a record cut or garbled (a capture stopped mid-line) is
  listed in `malformed` instead of raising, and the records before it stand."""
  header, ops, forge_ops, mem, cost, cost_type, done, errors = {}, [], [], {}, [], {}, {}, []
  images: list[dict] = []
  decisions: list[dict] = []
  chunks: dict = {}
  malformed = []
  for lineno, line in enumerate(text.splitlines(), 1):
    rec = _fields(line)
    if rec is None:
      continue
    kind, f = rec
    try:
      if kind == "forge_app":
        header = f
      elif kind == "op":
        ops.append(f["name"])
        if f.get("forge") == "1":
          forge_ops.append(int(f["index"]))
      elif kind == "mem":
        mem = {k: int(v) for k, v in f.items()}
      elif kind == "img":
        images.append(_image(f, images[0] if images else None, len(images)))
      elif kind == "gate":
        decisions.append({"image": int(f["image"]), "on": f["decision"] == "on",
                          "score": int(f["score_e6"]) / 1e6,
                          "autocorrelation": int(f["autocorrelation_e6"]) / 1e6,
                          "autocorrelation_adapted":
                              int(f["autocorrelation_adapted_e6"]) / 1e6})
      elif kind == "tensor":
        key = (int(f["image"]), int(f["op"]))
        values = np.array([int(v) for v in f["values"].split(",") if v], np.int8)
        buf = chunks.setdefault(key, np.zeros(int(f["bytes"]), np.int8))
        buf[int(f["offset"]):int(f["offset"]) + len(values)] = values
      elif kind == "cost":
        cost.append({"name": f["name"], "calls": int(f["calls"]), "ticks": int(f["ticks"])})
      elif kind == "cost_type":
        cost_type[f["name"]] = {"ops": int(f["ops"]), "ticks": int(f["ticks"])}
      elif kind == "done":
        done = {"images": int(f["images"]), "status": f["status"], "ticks": int(f["ticks"])}
      elif kind == "error":
        errors.append(f)
    except (KeyError, ValueError, IndexError):
      malformed.append((lineno, line.strip()[:120]))
  n = len(images)

  def stack(key, dtype):
    if not images or key not in images[0]:
      return None
    return np.array([im[key] for im in images], dtype).reshape(n, -1)

  logits = stack("logits", np.int8)
  return AppRun(
      header=header, ops=ops, forge_ops=forge_ops, mem=mem,
      logits=logits if logits is not None else np.zeros((n, 0), np.int8),
      predictions=np.array([im["pred"] for im in images], np.int64),
      ticks=np.array([im["ticks"] for im in images], np.int64),
      forge_checksums=stack("forge", np.uint32), op_checksums=stack("trace", np.uint32),
      state_checksums=stack("state", np.uint32),
      cost=cost, cost_type=cost_type, done=done, errors=errors, tensors=chunks,
      malformed=malformed, paths=[im["path"] for im in images if "path" in im],
      gate_decisions=decisions)


def _image(f: dict, first: dict | None, index: int) -> dict:
  """One img record, checked against the first one (same fields, same lengths), so
  that a line cut short is rejected whole."""
  if int(f["index"]) != index:
    raise ValueError(f"image {f['index']} where {index} was expected")
  im = {"pred": int(f["pred"]), "ticks": int(f.get("ticks", 0))}
  if "path" in f:
    im["path"] = f["path"]
  if "logits" in f:
    im["logits"] = [int(v) for v in f["logits"].split(",")]
    if not all(-128 <= v <= 127 for v in im["logits"]):
      raise ValueError("logit out of int8 range")
  for key in ("forge", "state", "trace"):
    if key in f:
      im[key] = [int(v, 16) for v in f[key].split(",") if v]
  if first is not None:
    if set(im) != set(first) or any(len(im[k]) != len(first[k])
                                    for k in im if isinstance(im[k], list)):
      raise ValueError("image record differs in shape from image 0 (cut short?)")
  return im
