"""Parses the lines the application core prints (esp32s3_app/core/forge_app.h).

Lines that are not records (boot logs, MicroPrintf) are ignored, so a serial
console capture parses as it is. A record is a line whose first word is a record
kind and which has key=value fields; each kind's fields and their types are in
SCHEMA (what forge_app.cc prints), and a record with a missing, unknown, repeated
or out-of-range field is `malformed` (line number, reason naming the field), never
a partial value or an exception. A board reset after the app started (a boot or
panic banner, a second `forge_app` header) ends the run: what follows is listed in
`resets` and not parsed.
"""

from __future__ import annotations

import collections
import dataclasses
import re

import numpy as np

# A dumped tensor larger than this is not an int8 activation of a model a
# microcontroller runs (the ESP32-S3 addresses at most 32 MiB of PSRAM).
MAX_TENSOR_BYTES = 1 << 26
# ESP-IDF / ROM lines that mean the chip restarted or crashed.
RESET_BANNER = re.compile(r"(rst:0x[0-9a-f]+|ESP-ROM:|ets [A-Z][a-z]{2} +\d|Rebooting\.\.\."
                          r"|Guru Meditation Error|abort\(\) was called|Backtrace:)")


# Numbers as the app prints them (%lu, %d, %08lx): one spelling per value, so that a
# record verifies only if it is the expected text.
_DECIMAL = re.compile(r"0|-?[1-9][0-9]{0,19}")
_HEX32 = re.compile(r"[0-9a-f]{8}")


def _uint(bits: int):
  def parse(v: str) -> int:
    if not _DECIMAL.fullmatch(v) or not 0 <= int(v) < 1 << bits:
      raise ValueError(f"{v[:40]!r} is not an unsigned {bits}-bit integer")
    return int(v)
  return parse


def _int(lo: int, hi: int):
  def parse(v: str) -> int:
    if not _DECIMAL.fullmatch(v) or not lo <= int(v) <= hi:
      raise ValueError(f"{v[:40]!r} is not an integer in [{lo}, {hi}]")
    return int(v)
  return parse


_INT8 = _int(-128, 127)


def _int8_list(v: str) -> list[int]:
  return [_INT8(x) for x in v.split(",")] if v else []


def _hex32_list(v: str) -> list[int]:
  """Checksums, as the app prints them (%08lx): exactly 8 hex digits each."""
  out = []
  for x in (v.split(",") if v else []):
    if not _HEX32.fullmatch(x):
      raise ValueError(f"{x[:40]!r} is not a 32-bit checksum (8 hex digits)")
    out.append(int(x, 16))
  return out


def _one_of(*values: str):
  def parse(v: str) -> str:
    if v not in values:
      raise ValueError(f"{v[:40]!r} is not one of {'/'.join(values)}")
    return v
  return parse


def _name(v: str) -> str:
  if not 0 < len(v) <= 128:  # A builtin's name, a custom code or "?".
    raise ValueError(f"{v[:40]!r} is not an operator name")
  return v


def _shape(v: str) -> str:
  """AddShape's dims joined by x (a scalar prints none)."""
  if not re.fullmatch(r"([0-9]{1,9}(x[0-9]{1,9}){0,7})?", v):
    raise ValueError(f"{v[:40]!r} is not a shape like 1x32x32x3")
  return v


def _tensor_bytes(v: str) -> int:
  n = _uint(64)(v)
  if not 0 < n <= MAX_TENSOR_BYTES:
    raise ValueError(f"{n} is not a tensor size in (0, {MAX_TENSOR_BYTES}]")
  return n


U32, U64, I32 = _uint(32), _uint(64), _int(-(1 << 31), (1 << 31) - 1)
OPTIONAL = "?"  # A key ending in it may be absent.
# What forge_app.cc prints, record by record: field -> parser ("error": free text).
# fc_guard: printed by apps built before the ESP-NN FC guard's removal
# (docs/decisions/esp-nn-fc-guard.md); accepted so their logs still verify, unused.
SCHEMA = {
    "forge_app": {"version": U32, "model_bytes": U64, "ops": U32, "forge_ops": U32,
                  "input": _shape, "input_bytes": U64, "output": _shape, "clock_hz": U64,
                  "mode": _one_of("adapt", "frozen", "gated"),
                  "trace": _one_of("none", "forge", "all"), "fc_guard?": U32},
    "op": {"index": U32, "name": _name, "forge": _one_of("0", "1")},
    "mem": {"arena_size": U64, "arena_used": U64, "forge_persistent": U64,
            "forge_scratch": U64, "forge_state?": U64, "states?": U32},
    "img": {"index": U32, "pred": U32, "logits?": _int8_list, "ticks": U64,
            "path?": _one_of("source", "adapt", "frozen"), "forge?": _hex32_list,
            "state?": _hex32_list, "trace?": _hex32_list},
    "gate": {"image": U32, "decision": _one_of("on", "off"), "score_e6": I32,
             "correlated": _one_of("0", "1"), "agreement_e6": I32, "chance_e6": I32},
    "tensor": {"image": U32, "op": U32, "offset": U32, "bytes": _tensor_bytes,
               "values": _int8_list},
    "cost": {"index": U32, "name": _name, "calls": U64, "ticks": U64},
    "cost_type": {"name": _name, "ops": U32, "ticks": U64},
    "done": {"images": U64, "status": _one_of("ok", "error"), "ticks": U64},
    "error": None,
}
RECORDS = tuple(SCHEMA)
# SCHEMA as the parser walks it: kind -> [(field, parser, required)], and the names.
_SPECS = {kind: [(k.rstrip(OPTIONAL), parse, not k.endswith(OPTIONAL))
                 for k, parse in spec.items()] for kind, spec in SCHEMA.items() if spec}
_KEYS = {kind: frozenset(name for name, _, _ in spec) for kind, spec in _SPECS.items()}


def _split(line: str) -> tuple[str, list[str]] | None:
  """(kind, its key=value words) for a record line; None for any other line."""
  parts = line.split()
  if not parts or parts[0] not in SCHEMA or not any("=" in p for p in parts[1:]):
    return None
  return parts[0], parts[1:]


def _fields(kind: str, words: list[str]) -> dict:
  """The record's fields, parsed and checked against SCHEMA[kind] (ValueError naming
  the field otherwise)."""
  if kind not in _SPECS:
    return _free_text(words)
  raw = {}
  for w in words:
    k, eq, v = w.partition("=")
    if not eq:
      raise ValueError(f"{w[:40]!r} is not key=value")
    if k in raw:
      raise ValueError(f"field {k!r} appears twice")
    raw[k] = v
  unknown = sorted(set(raw) - _KEYS[kind])
  if unknown:
    raise ValueError(f"unknown field {unknown[0][:40]!r}")
  out = {}
  for name, parse, required in _SPECS[kind]:
    if name not in raw:
      if required:
        raise ValueError(f"no {name}= field")
      continue
    try:
      out[name] = parse(raw[name])
    except ValueError as e:
      raise ValueError(f"{name}: {e}") from None
  return out


def _free_text(words: list[str]) -> dict:
  """An error record's fields: the app's platforms print prose after them (the
  ESP32-S3's "error what=arena_alloc bytes=N (needs PSRAM: ...)"), which continues the
  field before it, so that the error is reported as printed, not as malformed."""
  out, last = {}, None
  for w in words:
    k, eq, v = w.partition("=")
    if eq and k not in out:
      out[k], last = v, k
    elif last is not None:
      out[last] += " " + w
  return out


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
  cost: list[dict]                # per op: index, name, calls, ticks
  cost_type: dict[str, dict]      # name -> ops, ticks
  done: dict
  errors: list[dict]
  tensors: dict = dataclasses.field(default_factory=dict)  # (image, op) -> int8 [bytes]
  # The gate (mode=gated): per image the pass whose logits it printed
  # (source/adapt/frozen), and each probe's decision: image, on, score, autocorrelation
  # (the source path's and the adapting path's), as printed (*_e6) and / 1e6.
  paths: list = dataclasses.field(default_factory=list)
  gate_decisions: list = dataclasses.field(default_factory=list)
  malformed: list = dataclasses.field(default_factory=list)  # (line, reason, text)
  # The N well-formed img records: their index= (0.. when none is malformed), their
  # line, and how many img records the log has (well-formed or not).
  indices: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
  lines: list = dataclasses.field(default_factory=list)
  image_records: int = 0
  # Record lines by kind, well-formed or not, before the first reset (the parser keeps
  # the last mem line and one cost_type line per name: verify-device counts them here).
  records: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  op_lines: list = dataclasses.field(default_factory=list)  # (line, index, name, forge)
  resets: list = dataclasses.field(default_factory=list)    # (line, text) after the header
  header_line: int = 0

  @property
  def clock_hz(self) -> int:
    return int(self.header.get("clock_hz", 0))

  @property
  def ok(self) -> bool:
    return self.done.get("status") == "ok" and not self.errors


class _Parser:
  """Accumulates one run's records (see parse_app_output)."""

  def __init__(self):
    self.header, self.header_line, self.ops, self.mem, self.done = {}, 0, [], {}, {}
    self.cost, self.cost_type, self.errors, self.images, self.decisions = [], {}, [], [], []
    self.tensors, self.malformed, self.resets = {}, [], []
    self.records = collections.Counter()

  def add(self, lineno: int, kind: str, f: dict) -> None:
    if kind == "forge_app":
      self.header, self.header_line = f, lineno
    elif kind == "op":
      if f["index"] != len(self.ops):
        raise ValueError(f"index: op {f['index']} where {len(self.ops)} was expected")
      self.ops.append((lineno, f["index"], f["name"], f["forge"] == "1"))
    elif kind == "mem":
      self.mem = f
    elif kind == "img":
      self.images.append(_image(f, self.images[0] if self.images else None, lineno,
                                self.records["img"] - 1))
    elif kind == "gate":
      self.decisions.append(dict(f, line=lineno, on=f["decision"] == "on",
                                 score=f["score_e6"] / 1e6,
                                 correlated=f["correlated"] == "1",
                                 agreement=f["agreement_e6"] / 1e6,
                                 chance=f["chance_e6"] / 1e6))
    elif kind == "tensor":
      self._tensor(f)
    elif kind == "cost":
      self.cost.append(f)
    elif kind == "cost_type":
      self.cost_type[f["name"]] = {"ops": f["ops"], "ticks": f["ticks"]}
    elif kind == "done":
      if self.done:
        raise ValueError(f"a second done line (the first at line {self.done['line']})")
      self.done = dict(f, line=lineno)
    elif kind == "error":
      self.errors.append(f)

  def _tensor(self, f: dict) -> None:
    key, size, start = (f["image"], f["op"]), f["bytes"], f["offset"]
    if start + len(f["values"]) > size:
      raise ValueError(f"values: {len(f['values'])} values at offset {start} pass the "
                       f"end of a {size}-byte tensor")
    buf = self.tensors.setdefault(key, np.zeros(size, np.int8))
    if len(buf) != size:
      raise ValueError(f"bytes: {size}, an earlier record of this tensor said {len(buf)}")
    buf[start:start + len(f["values"])] = f["values"]


def parse_app_output(text: str) -> AppRun:
  """Parses a captured log; a record cut or garbled (a capture stopped mid-line) is
  listed in `malformed` instead of raising, and the records before it stand."""
  p = _Parser()
  for lineno, line in enumerate(text.splitlines(), 1):
    if p.header and RESET_BANNER.search(line):
      p.resets.append((lineno, line.strip()[:120]))
    rec = _split(line)
    if rec is None:
      continue
    if rec[0] == "forge_app" and p.header:
      p.resets.append((lineno, line.strip()[:120]))
    if p.resets:  # Another run (or none): only the first is compared.
      break
    p.records[rec[0]] += 1
    try:
      p.add(lineno, rec[0], _fields(*rec))
    except ValueError as e:
      p.malformed.append((lineno, f"{rec[0]} {e}", line.strip()[:120]))
  return _run(p)


def _run(p: _Parser) -> AppRun:
  images, n = p.images, len(p.images)

  def stack(key, dtype):
    if not images or key not in images[0]:
      return None
    return np.array([im[key] for im in images], dtype).reshape(n, -1)

  logits = stack("logits", np.int8)
  return AppRun(
      header=p.header, header_line=p.header_line, ops=[o[2] for o in p.ops],
      forge_ops=[o[1] for o in p.ops if o[3]], op_lines=p.ops, mem=p.mem,
      logits=logits if logits is not None else np.zeros((n, 0), np.int8),
      predictions=np.array([im["pred"] for im in images], np.int64),
      ticks=np.array([im["ticks"] for im in images], np.uint64),
      forge_checksums=stack("forge", np.uint32), op_checksums=stack("trace", np.uint32),
      state_checksums=stack("state", np.uint32),
      cost=p.cost, cost_type=p.cost_type, done=p.done, errors=p.errors, tensors=p.tensors,
      malformed=p.malformed, paths=[im["path"] for im in images if "path" in im],
      gate_decisions=p.decisions, indices=np.array([im["index"] for im in images], np.int64),
      lines=[im["line"] for im in images], image_records=p.records["img"], records=p.records,
      resets=p.resets)


def _image(f: dict, first: dict | None, lineno: int, index: int) -> dict:
  """One img record, checked against the first one (same fields, same lengths), so
  that a line cut short is rejected whole; `index`: the img records before it."""
  if f["index"] != index:
    raise ValueError(f"index: image {f['index']} where {index} was expected")
  im = dict(f, line=lineno)
  if first is not None:
    if set(im) != set(first) or any(len(im[k]) != len(first[k])
                                    for k in im if isinstance(im[k], list)):
      raise ValueError("fields or list lengths differ from image "
                       f"{first['index']}'s (cut short?)")
  return im
