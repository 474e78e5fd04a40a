"""`forge_tflm verify-device`: a device log against the exported expected outputs.

Reads what the application core printed on any target (ESP32-S3 monitor capture, the
host binaries, the Cortex-M emulation) and the expected.json that
`forge_tflm export-firmware` wrote for the same firmware, and reports: bit-exactness
image by image (logits, and every checksum the log carries: each FORGE op's output
and state, every op's output), the first divergence, accuracy on the device and on
the host with and without FORGE, time per image, FORGE's share and time per operator
type. Problems with the inputs (a log from another artifact, a truncated capture, an
error line) are stated in the report or as a one-line ValueError, never a traceback.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from forge_tflm.deploy.report import AppRun, parse_app_output


@dataclasses.dataclass
class Verification:
  images_expected: int
  images_logged: int
  identical: int                     # images whose every compared value matches
  first_divergence: str | None       # e.g. "image 17: logits differ at class 3 (...)"
  problems: list[str]                # truncation, error lines, malformed records
  accuracy_device: float | None
  accuracy_expected: float
  accuracy_source: float | None
  timing: list[str]                  # Markdown lines
  compared: list[str]                # what was compared ("logits", "FORGE state", ...)

  @property
  def ok(self) -> bool:
    return (not self.problems and self.images_logged == self.images_expected
            and self.identical == self.images_expected)

  def markdown(self) -> str:
    verdict = "BIT-EXACT" if self.ok else "NOT VERIFIED"
    lines = [f"# verify-device: {verdict}", "",
             f"- images: {self.images_logged} logged of {self.images_expected} expected; "
             f"{self.identical} identical ({', '.join(self.compared)})"]
    if self.first_divergence:
      lines.append(f"- first divergence: {self.first_divergence}")
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


def _hex(values) -> list[str]:
  return [f"{int(v):08x}" for v in values]


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


def verify(log_text: str, expected: dict) -> Verification:
  """Compares a captured log with an expected.json document (export.load_expected)."""
  run = parse_app_output(log_text)
  if not run.header:
    raise ValueError("no 'forge_app' line in the log: not output of the FORGE app (or "
                     "the capture started after boot: restart the board while capturing)")
  if int(run.header.get("model_bytes", -1)) != int(expected["model_bytes"]) or \
      (run.ops and run.ops != expected["ops"]):
    raise ValueError(f"the log is from another model ({run.header.get('model_bytes')} "
                     f"bytes, {len(run.ops)} ops) than expected.json "
                     f"({expected['model_bytes']} bytes, {len(expected['ops'])} ops): "
                     "flash the exported firmware or pass its expected.json")
  per = expected["per_image"]
  n_exp, n_log = len(per), len(run.predictions)
  problems = []
  if run.header.get("mode") not in (None, expected.get("mode")):
    problems.append(f"the device ran mode={run.header.get('mode')}, expected.json is for "
                    f"mode={expected.get('mode')}")
  for e in run.errors:
    problems.append("the app reported an error: " + " ".join(f"{k}={v}" for k, v in e.items()))
  for lineno, text in run.malformed:
    problems.append(f"malformed record at line {lineno} (capture cut?): {text!r}")
  if n_log < n_exp:
    problems.append(f"the log ends after {n_log} of {n_exp} images (truncated capture, "
                    "reset or crash)")
  elif n_log > n_exp:
    problems.append(f"the log has {n_log} images, expected.json {n_exp}")
  elif not run.ok and not run.errors:
    problems.append("no 'done ... status=ok' line")

  compared = ["logits"]
  gated = expected.get("mode") == "gated"
  if gated:
    compared = ["logits", "gate path"]
    want = [(d["image"], d["on"]) for d in expected.get("gate", {}).get("decisions", [])]
    got = [(d["image"], d["on"]) for d in run.gate_decisions]
    if got != want[:len(got)] or (n_log >= n_exp and len(got) != len(want)):
      problems.append(f"gate decisions (image, on) differ: device {got}, expected {want}")
  else:
    if run.forge_checksums is not None:
      compared.append("FORGE outputs")
    if run.state_checksums is not None:
      compared.append("FORGE state")
    if run.op_checksums is not None:
      compared.append("every op")
  identical, first = 0, None
  for n in range(min(n_exp, n_log)):
    e = per[n]
    why = None
    got = run.logits[n].astype(int).tolist()
    if got != e["logits"]:
      k = next(i for i, (a, b) in enumerate(zip(got, e["logits"])) if a != b) \
          if len(got) == len(e["logits"]) else None
      why = (f"logits differ (class {k}: device {got[k]}, expected {e['logits'][k]})"
             if k is not None else f"{len(got)} logits, expected {len(e['logits'])}")
    if why is None and "path" in e and (n >= len(run.paths) or run.paths[n] != e["path"]):
      why = (f"predicted by the {run.paths[n] if n < len(run.paths) else 'unknown'} pass, "
             f"expected the {e['path']} pass (gate)")
    if why is None and "trace" in e and run.op_checksums is not None and \
        _hex(run.op_checksums[n]) != e["trace"]:
      k = next((i for i, (a, b) in enumerate(zip(_hex(run.op_checksums[n]), e["trace"]))
                if a != b), None)
      why = f"op {k} ({expected['ops'][k] if k is not None else '?'}) output differs"
    if why is None and "forge" in e and run.forge_checksums is not None and \
        _hex(run.forge_checksums[n]) != e["forge"]:
      k = next(i for i, (a, b) in enumerate(zip(_hex(run.forge_checksums[n]), e["forge"]))
               if a != b)
      why = f"FORGE op {expected['forge_ops'][k]} output differs"
    if why is None and "state" in e and run.state_checksums is not None and \
        _hex(run.state_checksums[n]) != e["state"]:
      k = next(i for i, (a, b) in enumerate(zip(_hex(run.state_checksums[n]), e["state"]))
               if a != b)
      why = f"FORGE op {expected['forge_ops'][k]} state differs"
    if why is None:
      identical += 1
    elif first is None:
      first = f"image {n}: {why}"
  labels = np.array([e["label"] for e in per])
  source = [e.get("pred_source") for e in per]
  return Verification(
      images_expected=n_exp, images_logged=n_log, identical=identical,
      first_divergence=first, problems=problems,
      accuracy_device=float(np.mean(run.predictions[:n_exp] == labels[:n_log]))
      if n_log else None,
      accuracy_expected=float(np.mean([e["pred"] for e in per] == labels)),
      accuracy_source=float(np.mean(np.array(source) == labels))
      if None not in source else None,
      timing=_timing(run), compared=compared)
