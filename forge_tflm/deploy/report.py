"""Parses the lines the application core prints (esp32s3_app/core/forge_app.h).

Lines that are not records (boot logs, MicroPrintf) are ignored, so a serial
console capture parses as it is.
"""

from __future__ import annotations

import dataclasses

import numpy as np

RECORDS = ("forge_app", "op", "mem", "img", "tensor", "cost", "cost_type", "done", "error")


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

  @property
  def clock_hz(self) -> int:
    return int(self.header.get("clock_hz", 0))

  @property
  def ok(self) -> bool:
    return self.done.get("status") == "ok" and not self.errors


def parse_app_output(text: str) -> AppRun:
  header, ops, forge_ops, mem, cost, cost_type, done, errors = {}, [], [], {}, [], {}, {}, []
  logits, preds, ticks, fsums, osums, ssums = [], [], [], [], [], []
  chunks: dict = {}
  for line in text.splitlines():
    rec = _fields(line)
    if rec is None:
      continue
    kind, f = rec
    if kind == "forge_app":
      header = f
    elif kind == "op":
      ops.append(f["name"])
      if f.get("forge") == "1":
        forge_ops.append(int(f["index"]))
    elif kind == "mem":
      mem = {k: int(v) for k, v in f.items()}
    elif kind == "img":
      if int(f["index"]) != len(preds):
        raise ValueError(f"image records out of order at {line!r}")
      preds.append(int(f["pred"]))
      if "logits" in f:
        logits.append([int(v) for v in f["logits"].split(",")])
      ticks.append(int(f.get("ticks", 0)))
      if "forge" in f:
        fsums.append([int(v, 16) for v in f["forge"].split(",") if v])
      if "state" in f:
        ssums.append([int(v, 16) for v in f["state"].split(",") if v])
      if "trace" in f:
        osums.append([int(v, 16) for v in f["trace"].split(",") if v])
    elif kind == "tensor":
      key = (int(f["image"]), int(f["op"]))
      buf = chunks.setdefault(key, np.zeros(int(f["bytes"]), np.int8))
      values = np.array([int(v) for v in f["values"].split(",") if v], np.int8)
      buf[int(f["offset"]):int(f["offset"]) + len(values)] = values
    elif kind == "cost":
      cost.append({"name": f["name"], "calls": int(f["calls"]), "ticks": int(f["ticks"])})
    elif kind == "cost_type":
      cost_type[f["name"]] = {"ops": int(f["ops"]), "ticks": int(f["ticks"])}
    elif kind == "done":
      done = f
    elif kind == "error":
      errors.append(f)
  n = len(preds)
  return AppRun(
      header=header, ops=ops, forge_ops=forge_ops, mem=mem,
      logits=np.array(logits, np.int8).reshape(n, -1) if logits else np.zeros((n, 0), np.int8),
      predictions=np.array(preds, np.int64), ticks=np.array(ticks, np.int64),
      forge_checksums=np.array(fsums, np.uint32).reshape(n, -1) if fsums else None,
      op_checksums=np.array(osums, np.uint32).reshape(n, -1) if osums else None,
      state_checksums=np.array(ssums, np.uint32).reshape(n, -1) if ssums else None,
      cost=cost, cost_type=cost_type, done=done, errors=errors, tensors=chunks)
