"""Mutation fuzz of resume files, `eval --resume` (issue 53).

Each mutant is one finished stream's record (`<output>/streams/NNN_<stream>.json`)
changed, and goes through what a resumed evaluation runs: `ResultStore.start` (the
run's fingerprint, `fileio.load_json`'s limits, every record's checks) and, when
accepted, `merge_records` (what the reports are built from). In process, timed in
CPU seconds (TIME_LIMIT_S: a hang).

Seeds: genuine records of three runs of the tiny test model, written by
`run_evaluation` itself: "periodic" (source, forge, forge-gated with a gate period,
2 orderings; a plain stream and a two-domain one), "once" (forge-gated deciding once
per stream, 3 orderings) and "nogate" (source and forge). Mutators: manifest_fuzz's
generic JSON edits (delete, type, number, string, nesting, unknown),
  gate     one ordering's gate entries set to values a run may or may not write
           together (fired, score NaN, decisions 0 / -1 / past the images, adapted
           share), or gate lists added to a run without a gate or a period;
  domain   a domain renamed, added or dropped, a method added or dropped in the
           per-domain accuracies, or per-domain accuracies on a one-domain stream;
  list     an ordering added to or dropped from one list;
  text     truncation, a byte set, a duplicated key, prefix or trailing bytes.

Outcomes: ok (accepted, and the record is one its run could have written: the
oracle `impossible` below, written from evaluate_stream's output, not from the
checker), rejected (a one-line ResumeError naming the file), contradiction
(accepted but impossible), error (any other exception or a multi-line message),
hang.

  python -m forge_tflm.testing.resume_fuzz --mutants=2000     # summary JSON
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np

from forge_tflm.evaluation.protocol import EvalConfig, Stream, merge_records
from forge_tflm.evaluation.resume import STREAMS_DIR, ResultStore, ResumeError
from forge_tflm.testing import artifact_fuzz as af
from forge_tflm.testing import manifest_fuzz as mf

OUTCOMES = ("ok", "rejected", "contradiction", "error", "hang")
MUTATORS = ("delete", "type", "number", "string", "nesting", "unknown", "gate", "domain",
            "list", "text")
_MUTATOR_P = [0.08, 0.1, 0.1, 0.04, 0.04, 0.04, 0.3, 0.12, 0.06, 0.12]
TIME_LIMIT_S = 1.0
GATE_KEYS = ("gate_fired", "gate_score", "gate_correlated", "gate_adapted", "gate_probed",
             "gate_decisions")


# -- seeds: genuine records ------------------------------------------------------------

def _runs():
  """{seed: (config, streams)}: small streams of random 16x16 images."""
  from forge_tflm.evaluation.gate import GateConfig

  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (24, 16, 16, 3), dtype=np.uint8)
  labels = rng.integers(0, 10, 24)
  dark = (images * 0.3).astype(np.uint8)
  plain = [Stream("clean", images, labels), Stream("dark", dark, labels)]
  mixed = Stream("mixed", np.concatenate([images, dark]), np.concatenate([labels, labels]),
                 domains=np.repeat([0, 1], 24), domain_names=("clean", "dark"))
  gated = ("source", "forge", "forge-gated")
  return {"periodic": (EvalConfig(methods=gated, batch_size=8, orderings=2,
                                  gate=GateConfig(probe_images=8, period=8)),
                       [plain[0], mixed]),
          "once": (EvalConfig(methods=gated, batch_size=8, orderings=3,
                              gate=GateConfig(probe_images=8)), plain),
          "nogate": (EvalConfig(methods=("source", "forge"), batch_size=8, orderings=2),
                     [plain[1], mixed])}


def _seed_runs(workdir: str) -> dict:
  """{seed: output dir} of three finished runs of the tiny test model."""
  from forge_tflm.converter.options import ConvertOptions
  from forge_tflm.evaluation.run import run_evaluation
  from forge_tflm.ops import RecalibOptions
  from forge_tflm.testing import tiny_models

  artifact = os.path.join(workdir, "tiny.tflite")
  if not os.path.exists(artifact):
    tiny_models.convert_tiny(workdir, ConvertOptions(recalib=RecalibOptions(momentum=0.2)))
  out = {}
  for name, (config, streams) in _runs().items():
    out[name] = os.path.join(workdir, name)
    shutil.rmtree(out[name], ignore_errors=True)
    run_evaluation(config, streams, artifact_path=artifact, keras_path=None,
                   output_dir=out[name], command="fuzz", data_description="generated",
                   show_progress=False)
  return out


def seeds(workdir: str) -> dict:
  """{seed: (its ResultStore, {stream: record})} from genuine runs."""
  out = {}
  for name, d in _seed_runs(workdir).items():
    run = json.load(open(os.path.join(d, STREAMS_DIR, "run.json")))
    store = ResultStore(d, run["fingerprint"], run["streams"])
    out[name] = (store, store.start(resume=True))
  return out


# -- mutations -------------------------------------------------------------------------

def _gate_edit(rng, doc: dict) -> str:
  fired = doc.get("gate_fired")
  if not isinstance(fired, list) or not fired or rng.random() < 0.15:
    key = mf._pick(rng, GATE_KEYS)
    doc[key] = [mf._pick(rng, [True, False, 0, 0.5, 1]) for _ in range(2)]
    return f"{key} added"
  k = int(rng.integers(len(fired)))
  descs = []
  for _ in range(int(rng.integers(1, 4))):
    key = mf._pick(rng, GATE_KEYS)
    value = mf._pick(rng, {
        "gate_fired": [True, False], "gate_score": [float("nan"), 0.0, -0.5, 0.3],
        "gate_correlated": [True, False], "gate_adapted": [0.0, 0.25, 1.0],
        "gate_probed": [0.0, 0.125, 1.0],
        "gate_decisions": [0, 1, 2, -1, doc.get("images", 0), 10**6]}[key])
    if isinstance(doc.get(key), list) and k < len(doc[key]):
      doc[key][k] = value
      descs.append(f"{key}[{k}] = {value}")
  return ", ".join(descs) or "no gate edit possible"


def _domain_edit(rng, doc: dict) -> str:
  per = doc.get("domain_accuracy")
  if not isinstance(per, dict) or not per:
    doc["domain_accuracy"] = {m: {"clean": [0.5] * len(v)}
                              for m, v in doc.get("accuracy", {}).items()}
    return "per-domain accuracies on a one-domain stream"
  method = mf._pick(rng, sorted(per))
  r = rng.random()
  if r < 0.25:
    per[mf._pick(rng, ["tent", "bn-adapt", "forge-frozen"])] = copy.deepcopy(per[method])
    return "a method added"
  if r < 0.4:
    del per[method]
    return f"{method} dropped"
  domains = per[method]
  if not isinstance(domains, dict) or not domains:
    return "no domain edit possible"
  d = mf._pick(rng, sorted(domains))
  if r < 0.65:
    domains[mf._pick(rng, ["foggy", "Clean", d + "x"])] = domains.pop(d)
    return f"{method}: domain {d} renamed"
  if r < 0.85:
    domains["fog"] = copy.deepcopy(domains[d])
    return f"{method}: a domain added"
  del domains[d]
  return f"{method}: domain {d} dropped"


def _list_edit(rng, doc: dict) -> str:
  lists = [(c, k, v) for c, k, v in mf._positions(doc) if isinstance(v, list) and v]
  if not lists:
    return "no list"
  c, k, v = mf._pick(rng, lists)
  if rng.random() < 0.5:
    v.append(copy.deepcopy(v[-1]))
    return f"{k!r} one ordering longer"
  v.pop()
  return f"{k!r} one ordering shorter"


def mutate(seed_docs: dict, index: int, run_seed: int = 0):
  """(seed, mutator, description, (stream, file bytes)) of mutant `index`."""
  rng = np.random.default_rng([run_seed, index, 5353])
  seed = sorted(seed_docs)[index % len(seed_docs)]
  _, records = seed_docs[seed]
  stream = mf._pick(rng, sorted(records))
  doc = copy.deepcopy(records[stream])
  kind = MUTATORS[int(rng.choice(len(MUTATORS), p=_MUTATOR_P))]
  if kind == "text":
    data, desc = mf._text_mutation(rng, mf.dumps(doc), keys=[
        '"gate_fired": ', '"accuracy": ', '"images": ', '"forge": ', '"stream": '])
    return seed, kind, desc, (stream, data)
  edits = {"gate": _gate_edit, "domain": _domain_edit, "list": _list_edit}
  desc = edits[kind](rng, doc) if kind in edits else mf._mutate_doc(rng, doc, kind)
  return seed, kind, desc, (stream, mf.dumps(doc).encode())


# -- the oracle ------------------------------------------------------------------------

def _fractions(v, n) -> bool:
  return isinstance(v, list) and len(v) == n and all(
      type(x) in (int, float) and 0 <= x <= 1 for x in v)


def impossible(record: dict, fingerprint: dict) -> str | None:
  """Why `record` is not one evaluate_stream writes for this run (None: it may be)."""
  cfg = fingerprint["config"]
  methods, n = cfg["methods"], cfg["orderings"]
  stream = {s["name"]: s for s in fingerprint["streams"]}[record["stream"]]
  if type(record.get("images")) is not int or record["images"] != stream["images"]:
    return "images"
  for key in ("accuracy", "seconds"):
    if not isinstance(record.get(key), dict) or sorted(record[key]) != sorted(methods):
      return key
  for m in methods:
    s = record["seconds"][m]
    if not _fractions(record["accuracy"][m], n) or type(s) not in (int, float) or not (
        math.isfinite(s) and s >= 0):
      return f"accuracy or seconds of {m}"
  gated, periodic = "forge-gated" in methods, bool(cfg["gate"]["period"])
  want = set(GATE_KEYS[:3] if gated else ()) | set(GATE_KEYS[3:] if gated and periodic
                                                   else ())
  if {k for k in GATE_KEYS if k in record} != want:
    return f"gate keys {sorted(k for k in GATE_KEYS if k in record)}"
  if gated:
    fired, score = record["gate_fired"], record["gate_score"]
    if not (isinstance(fired, list) and len(fired) == n and all(type(f) is bool
                                                               for f in fired)):
      return "gate_fired"
    if not (isinstance(score, list) and len(score) == n and all(
        type(x) in (int, float) and (math.isfinite(x) or math.isnan(x)) for x in score)):
      return "gate_score"
    if any(f and math.isnan(x) for f, x in zip(fired, score)):
      return "fired without a score"
    c = record["gate_correlated"]
    if not (isinstance(c, list) and len(c) == n and all(type(x) is bool for x in c)):
      return "gate_correlated"
  if gated and periodic:
    dec = record["gate_decisions"]
    if not (_fractions(record["gate_adapted"], n) and _fractions(record["gate_probed"], n)
            and isinstance(dec, list) and len(dec) == n
            and all(type(d) is int and 0 <= d <= record["images"] for d in dec)):
      return "gate_adapted, gate_probed or gate_decisions"
    if any(d == 0 and (f or a > 0) for d, f, a in zip(dec, record["gate_fired"],
                                                        record["gate_adapted"])):
      return "adapting without a decision"
  domains = stream.get("domains") or []
  per = record.get("domain_accuracy")
  if not domains:
    return None if per is None else "domains on a one-domain stream"
  if not isinstance(per, dict) or sorted(per) != sorted(methods):
    return "domain_accuracy methods"
  for m in methods:
    if not isinstance(per[m], dict) or sorted(per[m]) != sorted(domains) or not all(
        _fractions(v, n) for v in per[m].values()):
      return f"domain_accuracy of {m}"
  return None


def check(seed_docs: dict, seed: str, stream_data: tuple):
  stream, data = stream_data
  store, records = seed_docs[seed]
  fingerprint = store.fingerprint
  path = store.path(stream)
  with open(path, "wb") as f:
    f.write(data)
  try:
    with af.cpu_limit(TIME_LIMIT_S):
      done = store.start(resume=True)
      merge_records(fingerprint["config"]["methods"], done.values())
  except af.CpuLimit:
    return "hang", f"over {TIME_LIMIT_S} CPU seconds"
  except ResumeError as e:
    msg = str(e)
    if "\n" in msg or not msg.startswith(path) or len(msg) > 2000:
      return "error", f"unclean message: {msg[:300]!r}"
    return "rejected", "FILE" + msg[len(path):]
  except Exception as e:  # A finding: anything else is a traceback to the user.
    return "error", f"{type(e).__name__}: {str(e)[:300]}"
  finally:
    with open(path, "w") as f:  # The genuine record back for the next mutant.
      json.dump(dict(records[stream], fingerprint_sha256=store.digest), f)
  why = impossible(done[stream], fingerprint)
  return ("contradiction", why) if why else ("ok", "")


def fuzz(mutants: int, run_seed: int = 0, start: int = 0, progress=None,
         workdir: str | None = None) -> dict:
  workdir = workdir or tempfile.mkdtemp(prefix="forge_resume_fuzz_")
  os.makedirs(workdir, exist_ok=True)
  seed_docs = seeds(workdir)
  return af.in_process(
      lambda i: mutate(seed_docs, i, run_seed),
      lambda seed, data: check(seed_docs, seed, data),
      mutants, start, OUTCOMES, progress, run_seed)


def main(argv=None) -> int:
  return af.in_process_main(fuzz, __doc__, argv)


if __name__ == "__main__":
  sys.exit(main())
