"""Mutation fuzz of FORGE manifests through the loading path (issue 34).

The model stays the seed's; only its manifest (`<stem>.json`) is mutated, as a user
editing the file would: type swaps, deletions, NaN / inf / huge numbers, deep nesting,
duplicated / reordered / dropped sites, edited channels, label_safe, options, scales,
tensor names and kinds, unknown fields, duplicated keys and damaged text. Each mutant
goes through `forge_tflm.artifact.load_manifest` (what `Artifact.load` runs on a
manifest: strict JSON, the schema, the checks against the model) with the seed model
validated once per worker; one mutant in FULL_PATH_EVERY also goes through the whole
`Artifact.load` and `SegmentedModel.from_artifact`, which must agree.

Seeds (model + the manifest `convert` would write): artifact_fuzz's "device" and
"extra" models, and "two_sites": the device model with two FORGE sites (a conv's,
label-safe, and a depthwise conv's). Outcomes:
  rejected     a one-line ArtifactError naming the manifest file;
  ok           accepted, and everything the model states (sizes, quantization, every
               site's operator, channels, options, tensors, kind) and the memory the
               tools size from it are the seed's;
  contradiction  accepted although it contradicts the model (a finding);
  error        any other exception, a multi-line or unnamed message (a finding);
  crash, hang  the worker died by a signal / past TIME_LIMIT_S (a finding).
Workers are processes that run mutants in a loop; when one dies, its mutant is
recorded and a new worker takes the rest.

  python -m forge_tflm.testing.manifest_fuzz --mutants=10000 --workers=2   # summary JSON
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

from forge_tflm import tflite_graph as tg
from forge_tflm.testing import artifact_fuzz as af

REPO_ROOT = af.REPO_ROOT
TIME_LIMIT_S = 20
FULL_PATH_EVERY = 50
OUTCOMES = ("ok", "rejected", "contradiction", "error", "crash", "hang")
FAILURES = ("contradiction", "error", "crash", "hang")
MUTATORS = ("delete", "type", "number", "string", "nesting", "sites", "edit", "text",
            "unknown", "targets")
_MUTATOR_P = [0.12, 0.14, 0.14, 0.07, 0.06, 0.1, 0.2, 0.09, 0.03, 0.05]


# -- seeds ----------------------------------------------------------------------------


def seed_model_two_sites(seed: int = 2) -> bytes:
  """The device seed with its FORGE op label-safe, and a second FORGE op (relu moved
  out of the depthwise conv) following the depthwise conv."""
  from ai_edge_litert import schema_py_generated as schema

  from forge_tflm.ops import RecalibOptions, encode_options

  rng = np.random.default_rng(seed)
  m = tg.load_model(af.seed_model())
  sg = m.subgraphs[0]

  def tensor(name, shape, ttype, data=None, like=None):
    t = copy.deepcopy(sg.tensors[like]) if like is not None else schema.TensorT()
    t.name, t.shape, t.type = name, list(shape), ttype
    t.buffer = 0 if data is None else tg.add_const_buffer(m, np.asarray(data))
    sg.tensors.append(t)
    return len(sg.tensors) - 1

  forge, dw = sg.operators[1], sg.operators[2]
  c = int(sg.tensors[forge.inputs[0]].shape[-1])
  forge.customOptions = list(encode_options(RecalibOptions(
      momentum=0.1, activation="relu", label_safe=1)))
  out = dw.outputs[0]
  pre = tensor("dw/pre", sg.tensors[out].shape, sg.tensors[out].type, like=out)
  sg.tensors[pre].quantization = af._quant(0.05, 0)
  dw.outputs = [pre]
  dw.builtinOptions.fusedActivationFunction = schema.ActivationFunctionType.NONE
  op = schema.OperatorT()
  op.opcodeIndex, op.outputs = forge.opcodeIndex, [out]
  op.inputs = [pre, tensor("bn1/beta", [c], schema.TensorType.FLOAT32,
                           rng.normal(0, 0.5, c).astype(np.float32)),
               tensor("bn1/gamma_abs", [c], schema.TensorType.FLOAT32,
                      rng.uniform(0.5, 2.0, c).astype(np.float32))]
  op.customOptions = list(encode_options(RecalibOptions(
      window=32, activation="relu", variance="batch")))
  op.customOptionsFormat = forge.customOptionsFormat
  sg.operators.insert(3, op)
  return tg.save_model(m)


SEEDS = {"device": af.seed_model, "extra": af.seed_model_extra,
         "two_sites": seed_model_two_sites}


def seed_manifest(model: bytes) -> dict:
  """artifact_fuzz.seed_manifest with each site's kind that of its conv."""
  doc = af.seed_manifest(model)
  m = tg.load_model(model)
  ops = m.subgraphs[0].operators
  for site in doc["sites"]:
    producer = tg.op_name(m, ops[site["op_index"] - 1])
    site["kind"] = "depthwise" if producer == "DEPTHWISE_CONV_2D" else "conv"
    site["name"] = f"bn@{site['op_index']}"
  doc["bn_sites_found"] = [s["name"] for s in doc["sites"]]
  return doc


def facts(manifest) -> str:
  """What the model states and what the tools size from it, as one comparable value."""
  sites = [(s.op_index, s.channels, s.options, s.kind, s.input_tensor, s.output_tensor,
            float(np.float32(s.input_quant.scale)), s.input_quant.zero_point,
            float(np.float32(s.output_quant.scale)), s.output_quant.zero_point)
           for s in manifest.sites]
  q = [(float(np.float32(t.scale)), t.zero_point)
       for t in (manifest.input_quant, manifest.output_quant)]
  return repr((manifest.model_bytes, q, sites, manifest.memory_json(),
               manifest.to_json()["totals"]))


# -- mutations ------------------------------------------------------------------------

_RAW_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" + "0" * 30,
                "1" + "0" * 5000, "1e308", "-0.0", "1e-320", "4294967296", "-2147483649"]
_NUMBERS = [0, -1, 1, 2, -1000, 65536, 65537, 2**31, 2**63, 0.0, 0.5, -0.5, 1.5, 1e-300,
            1e300, 1e-45, 255, 256, -129, 127, 128, 10, 11, 1e-5]
_STRINGS = ["", "x", "conv", "depthwise", "int8", "recorded", "measured", "relu",
            "none", "\x00", "é" * 3, "x" * 5000, "bn@1", "conv0", "bn0", "dw/pre"]


class Raw:
  """A value written into the JSON text as is (what json.dumps cannot write)."""
  def __init__(self, text):
    self.text = text


def _positions(doc) -> list[tuple]:
  """(container, key, value) of every value under the root."""
  out, stack = [], [doc]
  while stack:
    v = stack.pop()
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(
        v, list) else ()
    for k, c in items:
      out.append((v, k, c))
      stack.append(c)
  return out


def _pick(rng, items):
  return items[int(rng.integers(len(items)))]


def nest(depth: int) -> Raw:
  """Empty lists nested `depth` deep, as raw JSON text."""
  return Raw("[" * depth + "]" * depth)


def _other_type(rng, value):
  choices = [None, True, False, 0, -1, 1.5, "x", [], {}, [value], {"value": value}]
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    choices.append(str(value))
  if isinstance(value, str):
    choices += [len(value), value.encode().hex()]
  return copy.deepcopy(_pick(rng, choices))


def _site_edit(rng, site, doc) -> str:
  """One model-stated or schema field of a site, set to another plausible value."""
  options = site.setdefault("options", {})
  field = _pick(rng, ["channels", "op_index", "kind", "input_tensor", "output_tensor",
                      "input_quantization", "output_quantization", "bn_eps",
                      "preact_saturated_fraction", "name", "conv", "options",
                      "options", "options", "label_safe", "state_bytes", "memory"])
  if field == "channels":
    site[field] = _pick(rng, [site.get(field, 8) + 1, site.get(field, 8) - 1, 0, -1000,
                              65536, 65537, 16, 4, 2**31])
  elif field == "op_index":
    site[field] = _pick(rng, [site.get(field, 1) + 1, site.get(field, 1) - 1, 0, -1, 99])
  elif field == "kind":
    site[field] = _pick(rng, ["conv", "depthwise", "dense", ""])
  elif field in ("input_tensor", "output_tensor"):
    site[field] = _pick(rng, ["conv0", "bn0", "dw", "dw/pre", "image", "add", "x"])
  elif field in ("input_quantization", "output_quantization"):
    q = site.setdefault(field, {})
    key = _pick(rng, ["scale", "zero_point"])
    q[key] = _pick(rng, [0, 0.0, -0.05, q.get(key, 0) * 2 if isinstance(
        q.get(key), (int, float)) else 1, 1e-45, 1e30, -128, 127, 128, -129, 1,
                         Raw("NaN")])
  elif field == "bn_eps":
    site[field] = _pick(rng, [0, -1e-5, 0.0, 1e-12, 1.0, 2.0, 1e300, Raw("NaN")])
  elif field == "preact_saturated_fraction":
    site[field] = _pick(rng, [-0.1, 1.0, 1.5, 0.5, Raw("Infinity")])
  elif field in ("name", "conv"):
    names = [s.get("name") for s in doc.get("sites", []) if isinstance(s, dict)]
    site[field] = _pick(rng, names + ["", "other", 7, "conv0"])
  elif field == "label_safe":
    if "label_safe" in options and rng.random() < 0.6:
      options.pop("label_safe")
      return "label_safe stripped"
    options["label_safe"] = _pick(rng, [0, 1, 2, -1, True, 1.0])
  elif field == "options":
    key = _pick(rng, ["momentum", "window", "eps", "activation", "variance",
                      "label_safe", "classes"])
    if key in options and rng.random() < 0.3:
      del options[key]
      return f"options.{key} deleted"
    options[key] = _pick(rng, {
        "momentum": [0.1, 0.2, 0.0, 1.0, 1.5, -0.1],
        "window": [16, 32, 33, 0, -1, 2**31],
        "eps": [1e-5, 1e-3, 0.0, -1e-5, 1.0],
        "activation": ["none", "relu", "relu6", "tanh"],
        "variance": ["running", "batch", "welford"],
        "label_safe": [0, 1, 2],
        "classes": [0, 10]}[key])  # A removed option: an unknown field.
    if key == "momentum" and rng.random() < 0.5:
      options.pop("window", None)
    if key == "window" and rng.random() < 0.5:
      options.pop("momentum", None)
  else:  # Derived fields.
    site[field] = _pick(rng, [0, 1, site.get(field), {"state": 1}])
  return f"{field} edited"


def _mutate_doc(rng, doc, kind: str) -> str:
  positions = _positions(doc)
  container, key, value = _pick(rng, positions)
  sites = [s for s in doc.get("sites", []) if isinstance(s, dict)]
  if kind == "delete":
    del container[key]
    return f"deleted {key!r}"
  if kind == "type":
    container[key] = _other_type(rng, value)
    return f"{key!r} -> {type(container[key]).__name__}"
  if kind == "number":
    numeric = [p for p in positions if isinstance(p[2], (int, float))
               and not isinstance(p[2], bool)]
    container, key, value = _pick(rng, numeric or positions)
    if rng.random() < 0.4:
      container[key] = Raw(_pick(rng, _RAW_NUMBERS))
      return f"{key!r} = {container[key].text[:20]}"
    container[key] = _pick(rng, _NUMBERS + ([-value, value + 1, value * 2] if isinstance(
        value, (int, float)) and not isinstance(value, bool) else []))
    return f"{key!r} = {container[key]!r}"
  if kind == "string":
    strings = [p for p in positions if isinstance(p[2], str)]
    container, key, value = _pick(rng, strings or positions)
    container[key] = _pick(rng, _STRINGS)
    return f"{key!r} = {container[key][:20]!r}"
  if kind == "nesting":
    depth = _pick(rng, [10, 63, 64, 65, 200, 999, 5000, 100000])
    container[key] = nest(depth)
    return f"{key!r} nested {depth} deep"
  if kind == "sites" and sites:
    r = rng.random()
    if r < 0.3:
      doc["sites"].append(copy.deepcopy(_pick(rng, sites)))
      return "site duplicated"
    if r < 0.5:
      doc["sites"].reverse()
      return "sites reversed"
    if r < 0.7:
      doc["sites"].pop(int(rng.integers(len(doc["sites"]))))
      return "site dropped"
    a, b = _pick(rng, sites), _pick(rng, sites)
    field = _pick(rng, list(a))
    if field in b:
      a[field] = copy.deepcopy(b[field])
    return f"site field {field!r} copied across sites"
  if kind == "edit" and sites:
    return _site_edit(rng, _pick(rng, sites), doc)
  if kind == "unknown":
    target = _pick(rng, [doc] + sites + [doc.get("input", {})])
    if isinstance(target, dict):
      target[_pick(rng, ["extra", "clases", "channel", "Sites", ""])] = 1
    return "unknown field added"
  if kind == "targets":
    doc["targets"] = _pick(rng, [
        {"source": "recorded"}, {"source": "measured", "images": 100},
        {"source": "measured"}, {"source": "measured", "images": 0},
        {"source": "measured", "images": -5}, {"source": "guessed"}, {},
        {"source": "recorded", "images": 3}, {"source": "measured", "images": 1.5},
        "recorded", None, {"source": "measured", "images": 100, "extra": 1}])
    return f"targets = {doc['targets']!r}"
  # Top-level edits where a kind needs sites the document lost.
  doc[_pick(rng, ["model_bytes", "manifest_version", "model_sha256"])] = _pick(
      rng, [0, 2, 2.0, True, "2", None, 1 << 40, "0" * 64])
  return "top-level field edited"


def dumps(doc) -> str:
  """json.dumps(doc, indent=1), each Raw value written as its text."""
  raws = []

  def default(o):
    if isinstance(o, Raw):
      raws.append(o.text)
      return f"__RAW_{len(raws) - 1}__"
    raise TypeError(type(o).__name__)

  text = json.dumps(doc, default=default, indent=1)
  for i, raw in enumerate(raws):
    text = text.replace(f'"__RAW_{i}__"', raw)
  return text


_KEYS = ['"channels": ', '"label_safe": ', '"scale": ', '"op_index": ', '"sites": ',
         '"kind": ']


def _text_mutation(rng, text: str, keys=_KEYS) -> tuple[bytes, str]:
  data = bytearray(text.encode())
  r = rng.random()
  if r < 0.25:
    cut = int(rng.integers(len(data)))
    return bytes(data[:cut]), f"truncated to {cut} bytes"
  if r < 0.45:
    at = int(rng.integers(len(data)))
    data[at] = _pick(rng, [0x00, 0x22, 0x7B, 0x7D, 0x5B, 0x2C, 0xFF, 0xC3,
                           int(rng.integers(256))])
    return bytes(data), f"byte @{at} set"
  if r < 0.7:  # A key written twice: json would keep the last one silently.
    key = _pick(rng, keys)
    at = text.find(key)
    if at >= 0:
      end = text.find("\n", at)
      line = text[at:end].rstrip(",")
      dup = line.split(": ", 1)[0] + ": " + _pick(rng, ["1", "0", '"x"', "[]", "16"])
      return (text[:at] + dup + ",\n" + text[at:]).encode(), f"key {key.strip()} twice"
    return text.encode(), "no duplicate key possible"
  if r < 0.85:
    return _pick(rng, [b"\xef\xbb\xbf", b"", b"\xff"]) + bytes(data), "prefix bytes"
  return bytes(data) + _pick(rng, [b"{}", b" x", b"\x00", b"]"]), "trailing bytes"


def mutate(manifest: dict, index: int, run_seed: int = 0) -> tuple[bytes, str, str]:
  """(manifest file bytes, mutator, description) of mutant `index`; deterministic."""
  rng = np.random.default_rng([run_seed, index, 34])
  kind = MUTATORS[int(rng.choice(len(MUTATORS), p=_MUTATOR_P))]
  doc = copy.deepcopy(manifest)
  if kind == "text":
    data, desc = _text_mutation(rng, dumps(doc))
    return data, kind, desc
  descs = [_mutate_doc(rng, doc, kind)]
  if rng.random() < 0.15:  # Sometimes two edits, the second where the first allows.
    try:
      descs.append(_mutate_doc(rng, doc, MUTATORS[int(rng.integers(len(MUTATORS) - 1))]))
    except (TypeError, AttributeError, KeyError, IndexError):
      pass
  return dumps(doc).encode(), kind, "; ".join(descs)


def seed_for(index: int, run_seed: int = 0) -> str:
  return _pick(np.random.default_rng([run_seed, index, 35]), list(SEEDS))


# -- running mutants (in a worker) -----------------------------------------------------


def classify(load, path: str, seed_facts: str) -> tuple[str, str]:
  """Runs load(path) -> Manifest; the outcome and its message."""
  from forge_tflm.artifact import ArtifactError

  try:
    manifest = load(path)
  except ArtifactError as e:
    msg = str(e)
    if not msg or "\n" in msg or path not in msg:
      return "error", f"unclean message: {msg!r}"[:500]
    return "rejected", msg[:500]
  except Exception as e:  # noqa: BLE001 - anything else is a finding.
    return "error", f"{type(e).__name__}: {e}"[:500]
  try:
    got = facts(manifest)
  except Exception as e:  # noqa: BLE001
    return "error", f"accepted, then {type(e).__name__}: {e}"[:500]
  if got != seed_facts:
    return "contradiction", f"accepted: {got[:400]}"
  return "ok", ""


def _full_path(path: str):
  from forge_tflm.artifact import Artifact
  from forge_tflm.runtime.segmented import SegmentedModel

  artifact = Artifact.load(path + ".tflite")
  SegmentedModel.from_artifact(artifact)
  return artifact.manifest


def worker(run_seed: int, indices, workdir: str, out) -> None:
  """Validates each seed model once, then runs mutants in a loop, one record a line."""
  from forge_tflm.artifact import load_manifest
  from forge_tflm.model_check import check_model

  seeds = {}
  for name, build in SEEDS.items():
    model = build()
    stem = os.path.join(workdir, name)
    with open(stem + ".tflite", "wb") as f:
      f.write(model)
    doc = seed_manifest(model)
    with open(stem + ".json", "w") as f:
      json.dump(doc, f)
    parsed = check_model(model, stem + ".tflite")
    seeds[name] = (stem, doc, facts(load_manifest(stem + ".json", model, parsed)),
                   lambda p, model=model, parsed=parsed: load_manifest(p, model, parsed))
  _full_path(seeds["two_sites"][0])  # Warm up LiteRT.
  signal.signal(signal.SIGALRM, signal.SIG_DFL)  # A hang kills the worker.
  for index in indices:
    name = seed_for(index, run_seed)
    stem, doc, seed_facts, load = seeds[name]
    data, mutator, desc = mutate(doc, index, run_seed)
    path = f"{stem}_m.json"
    with open(path, "wb") as f:
      f.write(data)
    record = {"index": index, "seed": name, "mutator": mutator, "desc": desc[:300]}
    t0 = time.monotonic()
    signal.alarm(TIME_LIMIT_S)
    record["outcome"], record["message"] = classify(load, path, seed_facts)
    if index % FULL_PATH_EVERY == 0:  # The whole loading path agrees.
      os.replace(path, stem + ".json")
      full, _ = classify(_full_path, stem, seed_facts)
      with open(stem + ".json", "w") as f:
        json.dump(doc, f)
      if full != record["outcome"]:
        record["outcome"] = "error"
        record["message"] = f"Artifact.load says {full}, load_manifest {record['outcome']}"
    signal.alarm(0)
    record["seconds"] = round(time.monotonic() - t0, 4)
    if record["outcome"] in FAILURES:
      keep = os.path.join(workdir, f"finding_{index}.json")
      with open(keep, "wb") as f:
        f.write(data)
      record["file"] = keep
    out.write(json.dumps(record) + "\n")
    out.flush()


def _start(run_seed, start, stop, step, workdir):
  cmd = [sys.executable, "-m", "forge_tflm.testing.manifest_fuzz", "--worker",
         f"--run_seed={run_seed}", f"--start={start}", f"--stop={stop}",
         f"--step={step}", f"--workdir={workdir}"]
  env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get(
      "PYTHONPATH", ""))
  log = open(os.path.join(workdir, "worker.log"), "a")  # Library chatter.
  return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, cwd=REPO_ROOT,
                          env=env, text=True)


def fuzz(mutants: int, workers: int = 2, run_seed: int = 0, start: int = 0,
         workdir: str | None = None, progress=None) -> dict:
  """Runs mutants [start, start + mutants) on `workers` worker processes."""
  workdir = workdir or tempfile.mkdtemp(prefix="forge_mfuzz_")
  stop = start + mutants
  sel = selectors.DefaultSelector()
  counts = collections.Counter()
  by_mutator = collections.defaultdict(collections.Counter)
  by_seed = collections.defaultdict(collections.Counter)
  findings, seconds, exit_codes = [], [], []
  t0 = time.time()
  for w in range(workers):
    wdir = os.path.join(workdir, f"worker{w}")
    os.makedirs(wdir, exist_ok=True)
    p = _start(run_seed, start + w, stop, workers, wdir)
    sel.register(p.stdout, selectors.EVENT_READ, (p, wdir, start + w))
  while sel.get_map():
    for key, _ in sel.select():
      p, wdir, next_index = key.data
      line = key.fileobj.readline()
      if line:
        rec = json.loads(line)
        sel.modify(key.fileobj, selectors.EVENT_READ, (p, wdir, rec["index"] + workers))
        counts[rec["outcome"]] += 1
        by_mutator[rec["mutator"]][rec["outcome"]] += 1
        by_seed[rec["seed"]][rec["outcome"]] += 1
        seconds.append(rec["seconds"])
        if rec["outcome"] in FAILURES:
          findings.append(rec)
        done = sum(counts.values())
        if progress and done % 1000 == 0:
          progress(done, counts)
        continue
      sel.unregister(key.fileobj)
      code = p.wait()
      exit_codes.append(code)
      if next_index < stop:  # Died on mutant next_index: record it, go on after it.
        outcome = "hang" if code == -signal.SIGALRM else "crash"
        rec = {"index": next_index, "seed": seed_for(next_index, run_seed),
               "mutator": "?", "desc": "", "outcome": outcome,
               "message": f"worker exit status {code}", "seconds": 0.0}
        counts[outcome] += 1
        by_seed[rec["seed"]][outcome] += 1
        by_mutator["?"][outcome] += 1
        findings.append(rec)
        if next_index + workers < stop:
          q = _start(run_seed, next_index + workers, stop, workers, wdir)
          sel.register(q.stdout, selectors.EVENT_READ, (q, wdir, next_index + workers))
  return {"mutants": sum(counts.values()), "workers": workers, "run_seed": run_seed,
          "start": start, "counts": dict(counts),
          "by_mutator": {k: dict(v) for k, v in by_mutator.items()},
          "by_seed": {k: dict(v) for k, v in by_seed.items()}, "findings": findings,
          "worker_exit_codes": exit_codes, "wall_seconds": round(time.time() - t0, 1),
          "max_mutant_seconds": max(seconds, default=0.0),
          "mean_mutant_seconds": round(float(np.mean(seconds)) if seconds else 0.0, 5),
          "workdir": workdir}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--worker", action="store_true")
  p.add_argument("--run_seed", type=int, default=0)
  p.add_argument("--start", type=int, default=0)
  p.add_argument("--stop", type=int, default=0)
  p.add_argument("--step", type=int, default=1)
  p.add_argument("--workdir", default=None)
  p.add_argument("--mutants", type=int, default=1000)
  p.add_argument("--workers", type=int, default=2)
  args = p.parse_args(argv)
  if args.worker:
    worker(args.run_seed, range(args.start, args.stop, args.step), args.workdir,
           sys.stdout)
    return 0
  return af.campaign(fuzz, args, FAILURES)


if __name__ == "__main__":
  sys.exit(main())
