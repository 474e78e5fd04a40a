"""`forge_tflm verify-device`: a device log against the exported expected outputs.

Reads what the application core printed on any target (ESP32-S3 monitor capture, the
host binaries, the Cortex-M emulation) and the expected.json that
`forge_tflm export-firmware` wrote for the same firmware, and compares every value
the device prints that the host predicts: per image the prediction, the logits, the
pass the gate predicted with, every checksum the log carries (each FORGE op's output
and state, every op's output); the gate's decisions with their scores; the header
(model size, operators, FORGE ops, output size, mode); the mem line (FORGE's state
bytes and states against the export's sites); the cost and cost_type lines (each op
once per invoke, the per-type totals the cost lines give) and the done line. Any
difference in any one field makes the verdict NOT VERIFIED, naming the image (or
line) and the field. Fields the host has no value for (gated runs' FORGE checksums,
tensor dumps) are listed as not compared; times are reported: accuracy on the device
and on the host with and without FORGE, time per image, FORGE's share and time per
operator type. Problems with the inputs (a log from another artifact, a truncated
capture, a board reset, an error line, a malformed record) are stated in the report
or as a one-line ValueError, never a traceback.
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

from forge_tflm.deploy.report import AppRun, parse_app_output

# The gate's score and detector rates are printed in millionths (lround); the host
# computes them in float64 and the device in double with another summation order,
# so they agree to one unit of the last printed digit (the parity tests' bound).
GATE_TOLERANCE_E6 = 1
MAX_LISTED = 20  # malformed records listed one by one; the rest are counted
TICKS_MOD = 1 << 64  # the app sums ticks in uint64: its totals wrap there
# img fields holding checksums: (expected.json key, what a count says, what one is)
CHECKSUMS = (("forge", "FORGE output checksums", "FORGE op {op} output", "FORGE outputs"),
             ("state", "FORGE state checksums", "FORGE op {op} state", "FORGE state"),
             ("trace", "op output checksums", "op {k} ({name}) output", "every op"))


@dataclasses.dataclass
class Verification:
  images_expected: int
  images_logged: int
  identical: int                     # images whose every compared value matches
  first_divergence: str | None       # e.g. "image 17: logits differ (class 3: ...)"
  problems: list[str]                # truncation, error lines, malformed records, gate
  accuracy_device: float | None
  accuracy_expected: float
  accuracy_source: float | None
  timing: list[str]                  # Markdown lines
  compared: list[str]                # what was compared ("logits", "FORGE state", ...)
  not_compared: list[str] = dataclasses.field(default_factory=list)  # no expectation
  differing: dict = dataclasses.field(default_factory=dict)  # field -> images differing

  @property
  def ok(self) -> bool:
    return (not self.problems and self.images_logged == self.images_expected
            and self.identical == self.images_expected)

  def markdown(self) -> str:
    verdict = "BIT-EXACT" if self.ok else "NOT VERIFIED"
    lines = [f"# verify-device: {verdict}", "",
             f"- images: {self.images_logged} logged of {self.images_expected} expected; "
             f"{self.identical} identical ({', '.join(self.compared)})"]
    if self.not_compared:
      lines.append("- printed but not compared (expected.json has no values for them): "
                   + ", ".join(self.not_compared))
    if self.first_divergence:
      lines.append(f"- first divergence: {self.first_divergence}")
    if self.differing:
      lines.append("- images differing, by field: " + ", ".join(
          f"{k} {v}" for k, v in self.differing.items()))
    for p in self.problems:
      lines.append(f"- problem: {p}")
    acc = (f"{100 * self.accuracy_device:.2f}%" if self.accuracy_device is not None
           else "n/a")
    lines.append(f"- accuracy: device {acc}; host evaluator {100 * self.accuracy_expected:.2f}%"
                 " with FORGE" + (f", {100 * self.accuracy_source:.2f}% without (FORGE "
                                  "frozen at its clean targets)"
                                  if self.accuracy_source is not None else ""))
    if self.timing:
      lines += [""] + self.timing
    return "\n".join(lines) + "\n"


def _timing(run: AppRun) -> list[str]:
  hz = run.clock_hz
  if not hz or not len(run.ticks) or not np.any(run.ticks):
    return []
  ms = run.ticks / hz * 1e3
  out = [f"Time per image: {ms.mean():.3f} ms (std {ms.std():.3f}, clock {hz:,} Hz; "
         f"trace={run.header.get('trace', '?')}: time with trace=none)"]
  total = sum(c["ticks"] for c in run.cost_type.values())
  if total:
    forge = run.cost_type.get("FORGE_RECALIB", {}).get("ticks", 0)
    n = len(run.ticks)
    out += [f"FORGE (adapt): {forge / n / hz * 1e3:.3f} ms per image, "
            f"{100 * forge / total:.2f}% of operator time", "",
            "| operator | ops | ms per image | share |", "| --- | ---: | ---: | ---: |"]
    for name, c in sorted(run.cost_type.items(), key=lambda kv: -kv[1]["ticks"]):
      out.append(f"| {name} | {c['ops']} | {c['ticks'] / n / hz * 1e3:.3f} | "
                 f"{100 * c['ticks'] / total:.1f}% |")
  return out


def _check_same_model(run: AppRun, expected: dict) -> None:
  """ValueError unless the log's header and op lines are this expected.json's model."""
  if not run.header:
    bad = [m for m in run.malformed if m[1].startswith("forge_app ")]
    if bad:
      raise ValueError(f"line {bad[0][0]}: the 'forge_app' header is malformed ({bad[0][1]})")
    if run.errors:  # The app failed before its header (a small arena, a bad model).
      raise ValueError("the app reported an error before it ran any image: " + " ".join(
          f"{k}={v}" for k, v in run.errors[0].items()))
    raise ValueError("no 'forge_app' line in the log: not output of the FORGE app (or "
                     "the capture started after boot: restart the board while capturing)")
  if run.header["model_bytes"] != expected["model_bytes"] or \
      (run.ops and run.ops != expected["ops"]):
    raise ValueError(f"the log is from another model ({run.header['model_bytes']} "
                     f"bytes, {len(run.ops)} ops) than expected.json "
                     f"({expected['model_bytes']} bytes, {len(expected['ops'])} ops): "
                     "flash the exported firmware or pass its expected.json")


def _size(shape: str) -> int:
  """Values in a printed shape ("1x32x32x3"; "" for a scalar)."""
  return math.prod(int(d) for d in shape.split("x") if d)


def _header_problems(run: AppRun, expected: dict) -> list[str]:
  """The header's, op, mem and cost lines' fields the host knows, each compared."""
  h, at = run.header, f"header (line {run.header_line})"
  out = []
  if h["version"] != 1:
    out.append(f"{at}: version={h['version']}, this verify-device reads version 1")
  if h["ops"] != len(run.ops) or h["forge_ops"] != len(run.forge_ops):
    out.append(f"{at}: ops={h['ops']} forge_ops={h['forge_ops']}, the log has "
               f"{len(run.ops)} op lines, {len(run.forge_ops)} with forge=1")
  if run.ops and run.forge_ops != list(expected["forge_ops"]):
    out.append(f"op lines: forge=1 on ops {run.forge_ops}, expected.json's FORGE ops are "
               f"{list(expected['forge_ops'])}")
  if "input_bytes" in expected and h["input_bytes"] != expected["input_bytes"]:
    out.append(f"{at}: input_bytes={h['input_bytes']}, expected.json's images have "
               f"{expected['input_bytes']} bytes")
  if _size(h["input"]) != h["input_bytes"]:
    out.append(f"{at}: input={h['input']} is not input_bytes={h['input_bytes']} int8 values")
  classes = _size(h["output"])
  per = expected["per_image"]
  if per and classes != len(per[0]["logits"]):
    out.append(f"{at}: output={h['output']} ({classes} values), expected.json has "
               f"{len(per[0]['logits'])} logits per image")
  out += _mem_problems(run, expected)
  if h["mode"] != expected.get("mode"):
    out.append(f"{at}: the device ran mode={h['mode']}, expected.json is for "
               f"mode={expected.get('mode')}")
  for c in run.cost:
    if c["index"] >= len(run.ops) or c["name"] != run.ops[c["index"]]:
      out.append(f"cost line for op {c['index']} names {c['name']}, not that op")
      break
  if run.done and len(run.cost) != len(run.ops):
    # The app prints one cost line per op.
    out.append(f"{len(run.cost)} cost lines in a log of {len(run.ops)} ops: lines lost "
               "from the capture?")
  elif run.done:
    out += _cost_problems(run) + _cost_type_problems(run)
  return out


def _mem_problems(run: AppRun, expected: dict) -> list[str]:
  """The mem line against the export: one state per FORGE op, holding the state bytes
  of the export's FORGE sites, among FORGE's persistent bytes; an arena that holds
  what the device says it used. (arena_size is the build's: the Cortex-M and host apps
  keep a fixed arena larger than the export's estimate.)"""
  lines = run.records["mem"]
  m = run.mem
  if lines > 1 or (not lines and (run.image_records or run.done)):
    # PrintMemory runs once, between the op lines and the first image.
    return [f"{lines} mem lines, the app prints one before its first image"]
  if not m:
    return []  # Malformed (reported as such) or a capture cut before it.
  out = []
  if m["arena_used"] > m["arena_size"]:
    out.append(f"mem line: arena_used={m['arena_used']} > arena_size={m['arena_size']}")
  state = expected.get("forge_state_bytes")
  if state is not None and not {"forge_state", "states"} <= set(m):
    out.append("mem line: no forge_state= or states= field (the app of this export "
               "prints both)")
  if "states" in m and m["states"] != len(expected["forge_ops"]):
    out.append(f"mem line: states={m['states']}, the model has "
               f"{len(expected['forge_ops'])} FORGE ops")
  if "forge_state" in m and state is not None and m["forge_state"] != state:
    out.append(f"mem line: forge_state={m['forge_state']}, expected.json's FORGE sites "
               f"hold {state} state bytes")
  if "forge_state" in m and m["forge_persistent"] < m["forge_state"]:
    # The state buffers are among the persistent allocations the app counts.
    out.append(f"mem line: forge_persistent={m['forge_persistent']} < "
               f"forge_state={m['forge_state']}")
  return out


def _cost_problems(run: AppRun) -> list[str]:
  """The cost lines: one per op in model order; every invoke runs each op once, so
  all ops' calls are equal: 0 (a TFLM that does not call the profiler), the images
  run (adapt, frozen) or up to twice that (gated: a probe invokes two passes)."""
  out = []
  k = next((k for k, c in enumerate(run.cost) if c["index"] != k), None)
  if k is not None:
    out.append(f"cost line {k + 1} of {len(run.cost)}: index={run.cost[k]['index']}, the "
               f"app prints ops 0..{len(run.ops) - 1} in order")
  calls = sorted({c["calls"] for c in run.cost})
  if not run.ok or not calls:
    return out  # An invoke that failed midway ran only the ops before the failure.
  n, mode = run.done["images"], run.header["mode"]
  if len(calls) > 1:
    out.append(f"cost lines: calls={calls[0]}..{calls[-1]} differ between ops, every "
               "invoke runs each op once")
  elif calls[0] and (calls[0] != n if mode != "gated" else not n <= calls[0] <= 2 * n):
    out.append(f"cost lines: calls={calls[0]} for images={n} in mode={mode}"
               + (" (one invoke per image, two per probe)"
                  if mode == "gated" else " (one invoke per image)"))
  return out


def _cost_type_problems(run: AppRun) -> list[str]:
  """The cost_type lines, derived from the cost lines: per op name in first-seen
  order, its count of ops and their ticks summed (in uint64)."""
  lines = run.records["cost_type"]  # The parser keeps one line per name.
  want = {}
  for c in run.cost:
    ops, ticks = want.get(c["name"], (0, 0))
    want[c["name"]] = (ops + 1, (ticks + c["ticks"]) % TICKS_MOD)
  if lines != len(want) or list(run.cost_type) != list(want):
    return [f"{lines} cost_type lines for {list(run.cost_type)[:8]}, the app prints one "
            f"per op name in first-seen order: {list(want)[:8]}"]
  out = []
  for name, (ops, ticks) in want.items():
    got = run.cost_type[name]
    if got["ops"] != ops or got["ticks"] != ticks:
      out.append(f"cost_type line for {name}: ops={got['ops']} ticks={got['ticks']}, "
                 f"its cost lines give ops={ops} ticks={ticks}")
  return out


def _run_problems(run: AppRun, n_exp: int) -> list[str]:
  """Resets, error lines, malformed records, missing or extra images, the done line."""
  out = [f"the board reset or the app restarted at line {line} ({text!r}): only the "
         f"records before line {line} are compared (capture one run, from boot to 'done')"
         for line, text in run.resets[:1]]
  out += ["the app reported an error: " + " ".join(f"{k}={v}" for k, v in e.items())
          for e in run.errors]
  for line, why, text in run.malformed[:MAX_LISTED]:
    out.append(f"malformed record at line {line} ({why}): {text!r}")
  if len(run.malformed) > MAX_LISTED:
    out.append(f"{len(run.malformed) - MAX_LISTED} more malformed records")
  n_log = run.image_records
  if n_log < n_exp:
    out.append(f"the log ends after {n_log} of {n_exp} images (truncated capture, reset "
               "or crash)")
  elif n_log > n_exp:
    out.append(f"the log has {n_log} images, expected.json {n_exp}")
  elif not run.done:
    out.append("no 'done ... status=ok' line")
  done = run.done
  if done:
    at = f"done line {done['line']}"
    if done["status"] != "ok" and not run.errors:
      out.append(f"{at}: status={done['status']}")
    if done["images"] != n_log:
      out.append(f"{at}: images={done['images']}, the log has {n_log} img records")
    elif len(run.ticks) == n_log and \
        done["ticks"] != sum(int(t) for t in run.ticks) % TICKS_MOD:
      out.append(f"{at}: ticks={done['ticks']}, the img records sum to "
                 f"{sum(int(t) for t in run.ticks) % TICKS_MOD}")
  return out


def _first_difference(got: list, want: list):
  """None if equal; the count message's numbers, or (k, got[k], want[k])."""
  if len(got) != len(want):
    return len(got), len(want)
  k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
  return None if k is None else (k, got[k], want[k])


def _image_differences(run: AppRun, j: int, e: dict, expected: dict) -> list[tuple]:
  """(field, what differs) for each field of well-formed img record j that differs
  from its expected.json entry `e`."""
  out = []
  d = _first_difference(run.logits[j].tolist(), e["logits"])
  if d is not None:
    out.append(("logits", f"logits differ (class {d[0]}: device {d[1]}, expected {d[2]})"
                if len(d) == 3 else f"{d[0]} logits, expected {d[1]}"))
  if int(run.predictions[j]) != e["pred"]:
    out.append(("pred", f"pred differs (device {run.predictions[j]}, expected {e['pred']})"))
  if "path" in e:
    got = run.paths[j] if len(run.paths) == len(run.indices) else "no"
    if got != e["path"]:
      out.append(("path", f"path differs: predicted by the {got} pass, expected the "
                          f"{e['path']} pass (gate)"))
  arrays = {"forge": run.forge_checksums, "state": run.state_checksums,
            "trace": run.op_checksums}
  forge_ops, ops = expected["forge_ops"], expected["ops"]
  for key, count, one, _ in CHECKSUMS:
    if key not in e or arrays[key] is None:
      continue
    d = _first_difference(arrays[key][j].tolist(), [int(h, 16) for h in e[key]])
    if d is not None and len(d) == 3:
      k = d[0]
      name = one.format(op=forge_ops[k] if k < len(forge_ops) else f"#{k}", k=k,
                        name=ops[k] if k < len(ops) else "?")
      out.append((key, f"{name} differs (device {d[1]:08x}, expected {d[2]:08x})"))
    elif d is not None:
      out.append((key, f"{d[0]} {count}, expected {d[1]}"))
  return out


def _compare_images(run: AppRun, expected: dict):
  """(identical images, first divergence, field -> images differing)."""
  per = expected["per_image"]
  identical, first, differing = 0, None, collections.Counter()
  for j, n in enumerate(run.indices.tolist()):
    if n >= len(per):
      continue  # Counted as extra images by _run_problems.
    diffs = _image_differences(run, j, per[n], expected)
    differing.update(field for field, _ in diffs)
    if not diffs:
      identical += 1
    elif first is None:
      first = f"image {n}: {'; '.join(why for _, why in diffs)} [line {run.lines[j]}]"
  return identical, first, dict(differing)


def _gate_problems(run: AppRun, expected: dict) -> list[str]:
  """Each probe decision the log holds against expected.json's, field by field."""
  got = run.gate_decisions
  if expected.get("mode") != "gated":
    return [f"gate line {got[0]['line']}: a gate decision in a log checked against a "
            f"mode={expected.get('mode')} expected.json"] if got else []
  want = [w for w in expected.get("gate", {}).get("decisions", [])
          if w["image"] < run.image_records]  # A truncated log holds the first ones.
  out = []
  for d, w in zip(got, want):
    diffs = [f"image differs (device {d['image']}, expected {w['image']})"] \
        if d["image"] != w["image"] else []
    if d["on"] != w["on"]:
      diffs.append(f"decision differs (device {d['decision']}, expected "
                   f"{'on' if w['on'] else 'off'})")
    if d["correlated"] != w["correlated"]:
      diffs.append(f"label correlation differs (device {d['correlated']}, expected "
                   f"{w['correlated']})")
    for key in ("score", "agreement", "chance"):
      if not abs(d[key + "_e6"] - w[key] * 1e6) <= GATE_TOLERANCE_E6:  # NaN differs too
        diffs.append(f"{key} differs (device {d[key + '_e6']}e-6, expected {w[key]!r})")
    if diffs:
      out.append(f"gate line {d['line']} (image {d['image']}): " + "; ".join(diffs))
  if len(got) != len(want):
    out.append(f"{len(got)} gate decisions in the log, expected {len(want)} (at images "
               f"{[w['image'] for w in want]})")
  return out


def _fields_compared(run: AppRun, expected: dict) -> tuple[list[str], list[str]]:
  """(compared, printed without an expectation) for the report."""
  e = expected["per_image"][0] if expected["per_image"] else {}
  compared = ["logits", "pred"] + (["gate path", "gate decisions"] if "path" in e else [])
  arrays = {"forge": run.forge_checksums, "state": run.state_checksums,
            "trace": run.op_checksums}
  not_compared = []
  for key, _, _, label in CHECKSUMS:
    if arrays[key] is not None:
      (compared if key in e else not_compared).append(label)
  if run.paths and "path" not in e:
    not_compared.append("gate path")
  if run.tensors:
    not_compared.append("tensor dumps")
  return compared, not_compared


def decode_log(data: bytes) -> str:
  """A captured log's text: serial captures may hold bytes that are not UTF-8 (line
  noise, a baud rate mismatch); they become U+FFFD and the records around stand."""
  return data.decode("utf-8", errors="replace")


def verify(log_text: str, expected: dict) -> Verification:
  """Compares a captured log with an expected.json document (export.load_expected)."""
  run = parse_app_output(log_text)
  _check_same_model(run, expected)
  per = expected["per_image"]
  problems = (_header_problems(run, expected)
              + _run_problems(run, len(per))
              + _gate_problems(run, expected))
  identical, first, differing = _compare_images(run, expected)
  compared, not_compared = _fields_compared(run, expected)
  labels = np.array([e["label"] for e in per], np.int64)
  seen = run.indices < len(per)
  source = [e.get("pred_source") for e in per]
  return Verification(
      images_expected=len(per), images_logged=len(run.indices), identical=identical,
      first_divergence=first, problems=problems,
      accuracy_device=float(np.mean(run.predictions[seen] == labels[run.indices[seen]]))
      if np.any(seen) else None,
      accuracy_expected=float(np.mean(np.array([e["pred"] for e in per]) == labels)),
      accuracy_source=float(np.mean(np.array(source) == labels))
      if None not in source else None,
      timing=_timing(run), compared=compared, not_compared=not_compared,
      differing=differing)
