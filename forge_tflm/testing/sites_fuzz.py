"""Mutation fuzz of sites files, `convert --sites=@FILE` (issue 53).

Each mutant goes through what convert runs on the flag: `parse_sites` (the file
check, `fileio.load_json`'s limits, `read_sites_file`) and `select_sites` against the
sites MLPerf Tiny's int8 ResNet-8 has (its nine Conv->BN sites, found once). In
process: the code under test is Python, so nothing here can abort; a mutant is timed
in CPU seconds (load-independent), and one over TIME_LIMIT_S is a hang (the issue's
bound: refused within a second).

Seeds: "all" ({"sites": every site}, what `forge_tflm select` writes), "subset" (three
sites, with another key beside them) and "list" (a plain JSON list of five). Mutators:
manifest_fuzz's generic JSON edits (delete, type, number, string, nesting, unknown),
  names    a name duplicated, dropped, swapped with another site's, or replaced by an
           unknown, empty, 10,000-character, non-printable or non-ASCII one;
  many     up to 90,000 names (duplicates or unknown: a large file under the limit);
  size     padded past fileio's 1 MiB limit for settings files;
  text     truncation, a byte set, a duplicated key, prefix or trailing bytes.

Outcomes: ok (accepted: the names are exactly what a plain json.loads reads from the
file, each once and each a site of the model, and the selection keeps model order),
rejected (a one-line ValueError or OSError), contradiction (accepted but not so),
error (any other exception, or a message over several lines), hang.

  python -m forge_tflm.testing.sites_fuzz --mutants=2000     # summary JSON
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile

import numpy as np

from forge_tflm.cli.convert_cmd import parse_sites
from forge_tflm.converter.frontend_tflite import TfliteFrontend
from forge_tflm.converter.select import select_sites
from forge_tflm.fileio import MAX_SETTINGS_JSON_BYTES
from forge_tflm.testing import artifact_fuzz as af
from forge_tflm.testing import manifest_fuzz as mf
from forge_tflm.testing.convert_fuzz import MLPERF

OUTCOMES = ("ok", "rejected", "contradiction", "error", "hang")
MUTATORS = ("delete", "type", "number", "string", "nesting", "unknown", "names", "many",
            "size", "text")
_MUTATOR_P = [0.08, 0.1, 0.06, 0.08, 0.06, 0.04, 0.3, 0.06, 0.02, 0.2]
TIME_LIMIT_S = 1.0
_ODD_NAMES = ["", "x", "conv2d", "batch_normalization_99", "x" * 10_000, "bn\nname",
              "\x00", "é" * 4, " batch_normalization", "batch_normalization ", "\ud800"]


def model_sites() -> list:
  return TfliteFrontend(MLPERF).find_sites()


def seeds(found) -> dict:
  names = [s.name for s in found]
  return {"all": {"sites": names}, "subset": {"sites": names[5:8], "model": "resnet8"},
          "list": names[:5]}


def _names_edit(rng, names: list, all_names: list) -> str:
  r = rng.random()
  if r < 0.2 and names:
    names.append(mf._pick(rng, names))
    return "a name twice"
  if r < 0.35 and names:
    names.pop(int(rng.integers(len(names))))
    return "a name dropped"
  if r < 0.5 and names:
    names[int(rng.integers(len(names)))] = mf._pick(rng, all_names)
    return "a name replaced by another site's"
  at = int(rng.integers(len(names) + 1))
  odd = mf._pick(rng, _ODD_NAMES)
  names.insert(at, odd)
  return f"name {odd[:12]!r} inserted"


def _names_of(doc):
  return doc["sites"] if isinstance(doc, dict) else doc


def mutate(docs: dict, all_names: list, index: int, run_seed: int = 0):
  """(seed, mutator, description, file bytes) of mutant `index`; deterministic."""
  rng = np.random.default_rng([run_seed, index, 53])
  seed = ("all", "subset", "list")[index % 3]
  kind = MUTATORS[int(rng.choice(len(MUTATORS), p=_MUTATOR_P))]
  doc = copy.deepcopy(docs[seed])
  if kind == "text":
    data, desc = mf._text_mutation(rng, mf.dumps(doc), keys=['"sites": ', '"model": '])
    return seed, kind, desc, data
  if kind == "names":
    desc = _names_edit(rng, _names_of(doc), all_names)
  elif kind == "many":
    n = int(rng.integers(1000, 90_000))
    pool = all_names if rng.random() < 0.5 else [f"s{i}" for i in range(n)]
    _names_of(doc).extend(pool[i % len(pool)] for i in range(n))
    desc = f"{n:,} names added"
  elif kind == "size":
    text = mf.dumps(doc)
    pad = MAX_SETTINGS_JSON_BYTES - len(text) + int(rng.integers(1, 100))
    return seed, kind, f"padded by {pad:,} spaces", (" " * pad + text).encode()
  else:
    desc = mf._mutate_doc(rng, doc if isinstance(doc, dict) else {"sites": doc}, kind)
  return seed, kind, desc, mf.dumps(doc).encode()


def contradiction(data: bytes, names: tuple, chosen: list, found: list) -> str | None:
  """Why accepting `data` contradicts the file or the model (None: it does not)."""
  try:
    plain = json.loads(data.decode("utf-8"))
  except ValueError as e:
    return f"accepted, but json.loads refuses the file ({e})"
  listed = plain.get("sites") if isinstance(plain, dict) else plain
  if list(names) != listed:
    return f"read {len(names)} names, the file lists {str(listed)[:80]}"
  if len(set(names)) != len(names):
    return "accepted a name listed twice"
  model = [s.name for s in found]
  if not set(names) <= set(model):
    return f"accepted names the model lacks: {sorted(set(names) - set(model))[:3]}"
  if [s.name for s in chosen] != [n for n in model if n in names]:
    return "the selection is not the named sites in model order"
  return None


def check(path: str, data: bytes, found: list) -> tuple[str, str]:
  with open(path, "wb") as f:
    f.write(data)
  try:
    with af.cpu_limit(TIME_LIMIT_S):
      names = parse_sites(f"@{path}")
      chosen = select_sites(found, names)
  except af.CpuLimit:
    return "hang", f"over {TIME_LIMIT_S} CPU seconds"
  except (ValueError, OSError) as e:
    msg = str(e)
    if not msg or "\n" in msg or len(msg) > 2000:
      return "error", f"unclean message: {msg[:300]!r}"
    return "rejected", msg.replace(path, "FILE")
  except Exception as e:  # A finding: anything else is a traceback to the user.
    return "error", f"{type(e).__name__}: {str(e)[:300]}"
  why = contradiction(data, names, chosen, found)
  return ("contradiction", why) if why else ("ok", "")


def fuzz(mutants: int, run_seed: int = 0, start: int = 0, progress=None) -> dict:
  found = model_sites()
  docs, names = seeds(found), [s.name for s in found]
  with tempfile.TemporaryDirectory(prefix="forge_sites_fuzz_") as d:
    path = os.path.join(d, "sites.json")
    return af.in_process(
        lambda i: mutate(docs, names, i, run_seed), lambda seed, data: check(path, data, found),
        mutants, start, OUTCOMES, progress, run_seed)


def main(argv=None) -> int:
  return af.in_process_main(fuzz, __doc__, argv)


if __name__ == "__main__":
  sys.exit(main())
