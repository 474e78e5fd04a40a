"""Per-stream results on disk: an interrupted evaluation keeps every stream it
finished, and a resumed one re-does only the others.

In the output directory:
  streams/run.json           the run's fingerprint (artifact and float-model hashes,
                             the configuration, the data description, each stream's
                             name, size and content hash), the stream order, and
                             "complete" once the reports are written;
  streams/NNN_<stream>.json  one finished stream (accuracy per method and ordering,
                             gate decisions and scores, seconds), with the hash of
                             the fingerprint it belongs to.
Every file is written atomically (a temporary renamed into place), so a kill at
any moment leaves whole files. Resuming refuses a directory whose fingerprint
differs from the run asked for, naming what differs.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re

import numpy as np

from forge_tflm.fileio import (MAX_RESULTS_JSON_BYTES, JSONFileError, load_json,
                               write_atomically)

STREAMS_DIR = "streams"
RUN_FILE = "run.json"
_STREAM_FILE = re.compile(r"^\d{3}_[A-Za-z0-9_.-]*\.json$")


class ResumeError(ValueError):
  """The output directory's earlier run cannot be resumed or would be lost."""


def stream_digest(stream) -> str:
  """sha256 of a stream's images and labels (what its results are results of)."""
  h = hashlib.sha256()
  for a in (stream.images, stream.labels):
    a = np.ascontiguousarray(a)
    h.update(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.data)
  return h.hexdigest()


def _canonical(obj) -> str:
  return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _differences(old, new, prefix: str = "") -> list[str]:
  if isinstance(old, dict) and isinstance(new, dict):
    out = []
    for k in sorted(set(old) | set(new), key=str):
      key = f"{prefix}.{k}" if prefix else str(k)
      if k not in old or k not in new:
        out.append(f"{key} ({'only now' if k in new else 'only before'})")
      else:
        out += _differences(old[k], new[k], key)
    return out
  if _canonical(old) == _canonical(new):
    return []
  show = lambda v: (s if len(s := _canonical(v)) <= 60 else s[:57] + "...")
  return [f"{prefix or 'fingerprint'}: {show(old)} before, {show(new)} now"]


def _is_int(v) -> bool:
  return isinstance(v, int) and not isinstance(v, bool)


def _bool(v) -> bool:
  return isinstance(v, bool)


def _number(v) -> bool:
  return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _score(v) -> bool:
  return _number(v) or (isinstance(v, float) and math.isnan(v))  # NaN: no evidence.


def _fraction(v) -> bool:
  return _number(v) and 0 <= v <= 1


def _short(v) -> str:
  text = json.dumps(v)
  return text if len(text) <= 40 else text[:37] + "..."


class _RecordCheck:
  """The checks of one stream record; each failure is one line naming file and key."""

  def __init__(self, path: str, orderings):
    self.path, self.runs = path, orderings

  def bad(self, key, msg):
    raise ResumeError(" ".join(f"{self.path}: {key} {msg}; delete the file to re-do that"
                               " stream".split()))

  def values(self, key, data, check, what):
    if not isinstance(data, list) or (self.runs is not None and len(data) != self.runs):
      self.bad(key, f"must be a list of {self.runs} values (one per ordering)")
    for i, v in enumerate(data):
      if not check(v):
        self.bad(f"{key}[{i}]", f"is {_short(v)}, not {what}")

  def gate(self, record: dict, gated: bool, periodic: bool) -> None:
    """The gate's lists exist exactly where evaluate_stream writes them, and each
    ordering's entries agree: a fired gate took a decision, which has a score;
    images the adapting path predicted need a decision that turned it on."""
    for key, check, what, needed in _GATE_KEYS:
      wanted = gated and (needed == "gated" or periodic)
      if key in record and not wanted:
        self.bad(key, "is recorded, but this run's " + (
            "gate has no period" if gated else "methods have no forge-gated"))
      if wanted:
        if key not in record:
          self.bad(key, "is missing")
        self.values(key, record[key], check, what)
    if not gated:
      return
    for k, (fired, score) in enumerate(zip(record["gate_fired"], record["gate_score"])):
      if fired and math.isnan(score):
        self.bad(f"gate_score[{k}]", "is NaN, but the gate fired (a decision has a score)")
    if periodic:
      for k, (fired, adapted, decisions) in enumerate(zip(
          record["gate_fired"], record["gate_adapted"], record["gate_decisions"])):
        if decisions == 0 and (fired or adapted > 0):
          self.bad(f"gate_decisions[{k}]", "is 0, but the gate fired or the adapting"
                   " path predicted images (only a decision turns it on)")
        if decisions < 0 or decisions > record["images"]:
          self.bad(f"gate_decisions[{k}]", f"is {decisions}, not 0 to the stream's"
                   f" {record['images']} images")

  def domains(self, domains, methods: list, names: list) -> None:
    """Per-domain accuracies for exactly the run's methods and the stream's domains
    (none for a stream of one domain)."""
    if not names:
      if domains is not None:
        self.bad("domain_accuracy", "is recorded, but the stream has no domains")
      return
    if not isinstance(domains, dict) or set(domains) != set(methods):
      self.bad("domain_accuracy", f"must map exactly the methods {', '.join(methods)} to"
               " {domain: accuracies}")
    for m, per in domains.items():
      if not isinstance(per, dict) or set(per) != set(names):
        self.bad(f"domain_accuracy.{m}", f"must have exactly the stream's domains"
                 f" {', '.join(names)}")
      for d, accs in per.items():
        self.values(f"domain_accuracy.{m}.{d}", accs, _fraction, "a fraction in [0, 1]")


# (key, value check, what it must be, "gated": every gated run; "periodic": with a period)
_GATE_KEYS = (("gate_fired", _bool, "true or false", "gated"),
              ("gate_score", _score, "a number", "gated"),
              ("gate_correlated", _bool, "true or false", "gated"),
              ("gate_adapted", _fraction, "a fraction in [0, 1]", "periodic"),
              ("gate_probed", _fraction, "a fraction in [0, 1]", "periodic"),
              ("gate_decisions", _is_int, "an integer", "periodic"))


class ResultStore:
  """The per-stream results of one evaluation run in `output_dir/streams/`."""

  def __init__(self, output_dir: str, fingerprint: dict, stream_names: list[str]):
    self.dir = os.path.join(output_dir, STREAMS_DIR)
    self.run_path = os.path.join(self.dir, RUN_FILE)
    self.fingerprint = json.loads(_canonical(fingerprint))  # JSON-normal (lists).
    self.digest = hashlib.sha256(_canonical(self.fingerprint).encode()).hexdigest()
    self.names = list(stream_names)
    if len(set(self.names)) != len(self.names):
      raise ValueError(f"stream names repeat: {self.names}")

  def path(self, name: str) -> str:
    i = self.names.index(name)
    return os.path.join(self.dir, f"{i:03d}_{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.json")

  def _read_json(self, path: str) -> dict:
    try:
      # A gate score is NaN without probe images.
      data = load_json(path, nan=True, max_bytes=MAX_RESULTS_JSON_BYTES)
    except JSONFileError as e:
      raise ResumeError(f"{path}: not a results file ({str(e)[len(path) + 2:]})") from None
    if not isinstance(data, dict):
      raise ResumeError(f"{path}: not a results file (a JSON object expected)")
    return data

  def _stream_files(self) -> list[str]:
    if not os.path.isdir(self.dir):
      return []
    return sorted(n for n in os.listdir(self.dir) if _STREAM_FILE.match(n))

  def _write_run(self, complete: bool) -> None:
    doc = {"fingerprint_sha256": self.digest, "complete": complete,
           "streams": self.names, "fingerprint": self.fingerprint}
    write_atomically({self.run_path: (json.dumps(doc, indent=2) + "\n").encode()})

  def _clear(self) -> None:
    for n in self._stream_files():
      os.unlink(os.path.join(self.dir, n))

  def start(self, resume: bool) -> dict[str, dict]:
    """Opens the run; returns {stream: record} of the streams finished earlier
    (empty unless resuming). Without `resume`, an unfinished earlier run in the
    directory is refused rather than overwritten; a finished one is replaced."""
    earlier = self._read_json(self.run_path) if os.path.exists(self.run_path) else None
    files = self._stream_files()
    if earlier is None and files and resume:
      raise ResumeError(f"{self.dir} holds stream results but no {RUN_FILE}: cannot"
                        " tell what they are results of; delete them or use another"
                        " output directory")
    if not resume:
      if files and not (earlier or {}).get("complete"):
        raise ResumeError(
            f"{os.path.dirname(self.dir)} holds an unfinished evaluation ({len(files)}"
            f" stream(s) done): re-run with --resume to continue it, or delete"
            f" {self.dir} (or choose another output directory) to start over")
      self._clear()
      self._write_run(complete=False)
      return {}
    if earlier is None:  # Nothing to resume: a fresh run.
      self._write_run(complete=False)
      return {}
    if earlier.get("fingerprint_sha256") != self.digest:
      diff = _differences(earlier.get("fingerprint"), self.fingerprint)
      raise ResumeError(
          f"cannot resume the evaluation in {self.run_path}: it was run with another"
          f" configuration ({'; '.join(diff[:4]) or 'fingerprint differs'}"
          f"{f'; {len(diff) - 4} more' if len(diff) > 4 else ''}); use another output"
          " directory, or delete it to start over")
    done = {}
    for name in self.names:
      path = self.path(name)
      if not os.path.exists(path):
        continue
      record = self._read_json(path)
      if record.get("fingerprint_sha256") != self.digest or record.get("stream") != name:
        raise ResumeError(f"{path}: results of another run (fingerprint or stream"
                          " differs); delete it to re-do that stream")
      self._check_record(path, record)
      done[name] = record
    if earlier.get("complete"):
      self._write_run(complete=False)
    return done

  def _check_record(self, path: str, record: dict) -> None:
    """A finished stream's record holds what this run's would (evaluate_stream): its
    stream's image count, per method `orderings` accuracies (fractions in [0, 1]) and
    finite seconds, the gate's per-ordering lists where the run has a gate, and they
    agree with each other; one line naming the file and the key otherwise."""
    config = self.fingerprint.get("config") or {}
    methods = config.get("methods", [])
    stream = next((s for s in self.fingerprint.get("streams", [])
                   if isinstance(s, dict) and s.get("name") == record["stream"]), {})
    check = _RecordCheck(path, config.get("orderings"))
    for key in ("images", "accuracy", "seconds"):
      if key not in record:
        check.bad(key, "is missing")
    if record["images"] != stream.get("images", record["images"]) or not _is_int(
        record["images"]):
      check.bad("images", f"is {_short(record['images'])}, but the stream has"
                f" {stream.get('images')} images")
    for key in ("accuracy", "seconds"):
      if not isinstance(record[key], dict) or set(record[key]) != set(methods):
        check.bad(key, f"must have exactly the methods {', '.join(methods)}")
    for m in methods:
      check.values(f"accuracy.{m}", record["accuracy"][m], _fraction, "a fraction in [0, 1]")
      if not (_number(record["seconds"][m]) and record["seconds"][m] >= 0):
        check.bad(f"seconds.{m}", f"is {_short(record['seconds'][m])}, not a time >= 0")
    periodic = bool((config.get("gate") or {}).get("period"))
    check.gate(record, "forge-gated" in methods, periodic)
    check.domains(record.get("domain_accuracy"), methods, stream.get("domains", []))

  def save(self, record: dict) -> None:
    """Writes one finished stream's record (atomically)."""
    doc = dict(record, fingerprint_sha256=self.digest)
    write_atomically({self.path(record["stream"]):
                      (json.dumps(doc, indent=2) + "\n").encode()})

  def finish(self) -> None:
    self._write_run(complete=True)
