"""Genuine device logs and their expected.json, built line for line as the application
core prints them (esp32s3_app/core/forge_app.cc), for verify-device's tests and fuzz.

  exp = expected_doc()              # adapt mode, every checksum
  text = app_log(exp)               # what the app prints for it: verifies BIT-EXACT
  text = set_field(text, "img", 2, "pred", "7")   # one field of one record changed
"""

from __future__ import annotations

import numpy as np

from forge_tflm.deploy.export import EXPECTED_VERSION

OPS = ["CONV_2D", "FORGE_RECALIB", "MEAN", "FULLY_CONNECTED"]
# Names repeated, as in a real model: one cost_type line per name, its ops summed.
OPS_REPEATED = ["CONV_2D", "FORGE_RECALIB", "CONV_2D", "FORGE_RECALIB", "ADD", "MEAN",
                "FULLY_CONNECTED"]
N = 5
CHANNELS = 16  # per FORGE op: its state is 8 bytes per channel (forge_recalib_state_bytes)
OP_DATA = 172  # FORGE's other persistent bytes per op (forge_persistent - forge_state)
BOOT = "I (312) boot: ESP-IDF v5.3 2nd stage bootloader"  # noise the parser ignores


def expected_doc(mode: str = "adapt", images: int = N, ops=OPS) -> dict:
  """An expected.json document: mode "adapt" (checksums of every op, FORGE outputs and
  state) or "gated" (the pass per image and two probe decisions); `ops`: the model's
  op names (FORGE_RECALIB: a FORGE op of CHANNELS channels)."""
  rng = np.random.default_rng(0)
  forge_ops = [k for k, name in enumerate(ops) if name == "FORGE_RECALIB"]
  per = []
  for n in range(images):
    logits = rng.integers(-128, 128, 10).tolist()
    e = {"index": n, "label": n % 10, "pred": int(np.argmax(logits)),
         "pred_source": (n + 1) % 10, "logits": logits}
    if mode == "gated":
      e["path"] = "source" if n < 2 else "adapt"
    else:
      e.update(forge=[f"{n + 1 + f:08x}" for f in range(len(forge_ops))],
               state=[f"{n + 100 + f:08x}" for f in range(len(forge_ops))],
               trace=[f"{n * 4 + k:08x}" for k in range(len(ops))])
    per.append(e)
  doc = {"version": EXPECTED_VERSION, "model_bytes": 1234, "input_bytes": 3072,
         "ops": list(ops), "forge_ops": forge_ops, "images": images, "mode": mode,
         "forge_state_bytes": 8 * CHANNELS * len(forge_ops), "per_image": per}
  if mode == "gated":
    doc["gate"] = {"decisions": [
        {"image": 1, "on": True, "score": 0.125, "correlated": False,
         "agreement": 0.125, "chance": 0.0625},
        {"image": images - 1, "on": False, "score": -0.5, "correlated": True,
         "agreement": 0.5, "chance": 0.25}]}
  return doc


def _header(exp: dict, trace: str, model_bytes) -> list[str]:
  lines = [BOOT,
           f"forge_app version=1 model_bytes={model_bytes or exp['model_bytes']} "
           f"ops={len(exp['ops'])} forge_ops={len(exp['forge_ops'])} input=1x32x32x3 "
           "input_bytes=3072 output=1x10 clock_hz=240000000 "
           f"mode={exp['mode']} trace={trace}"]
  lines += [f"op index={k} name={name} forge={int(k in exp['forge_ops'])}"
            for k, name in enumerate(exp["ops"])]
  forge = len(exp["forge_ops"])
  state = exp.get("forge_state_bytes", 8 * CHANNELS * forge)
  lines.append(f"mem arena_size=131072 arena_used=90000 "
               f"forge_persistent={state + OP_DATA * forge} forge_scratch=4480 "
               f"forge_state={state} states={forge}")
  return lines


def _img(n: int, e: dict, trace: str, forge: int) -> str:
  rec = (f"img index={n} pred={int(np.argmax(e['logits']))} "
         f"logits={','.join(map(str, e['logits']))} ticks={2_400_000 + n}")
  if "path" in e:
    rec += f" path={e['path']}"
    if trace != "none":  # The app prints FORGE checksums in gated runs too.
      rec += (f" forge={','.join(f'{n + 7 + f:08x}' for f in range(forge))}"
              f" state={','.join(f'{n + 9 + f:08x}' for f in range(forge))}")
  elif trace != "none":
    rec += f" forge={','.join(e['forge'])} state={','.join(e['state'])}"
    if trace == "all":
      rec += f" trace={','.join(e['trace'])}"
  return rec


def _gate(d: dict) -> str:
  return (f"gate image={d['image']} decision={'on' if d['on'] else 'off'} "
          f"score_e6={round(d['score'] * 1e6)} "
          f"correlated={int(d['correlated'])} "
          f"agreement_e6={round(d['agreement'] * 1e6)} "
          f"chance_e6={round(d['chance'] * 1e6)}")


def app_log(exp: dict, *, images=None, trace=None, mutate=None, model_bytes=None) -> str:
  """The app's output for `exp`; images < all: the capture stops after that many
  img records (no cost/done lines); mutate(n, entry) -> the entry printed."""
  trace = trace or ("forge" if exp["mode"] == "gated" else "all")
  lines = _header(exp, trace, model_bytes)
  decisions = {d["image"]: d for d in exp.get("gate", {}).get("decisions", [])}
  n_all = len(exp["per_image"])
  for n in range(n_all if images is None else images):
    e = dict(exp["per_image"][n])
    lines.append(_img(n, mutate(n, e) if mutate else e, trace, len(exp["forge_ops"])))
    if n in decisions:
      lines.append(_gate(decisions[n]))
  if images is None:
    lines += _costs(exp["ops"], n_all)
    lines.append(f"done images={n_all} status=ok "
                 f"ticks={sum(2_400_000 + n for n in range(n_all))}")
  return "\n".join(lines) + "\n"


def _costs(ops: list[str], images: int) -> list[str]:
  """PrintCosts: per op (every op runs once per image), then per op name in first-seen
  order its count of ops and their ticks summed."""
  ticks = [images * 600_000 for _ in ops]
  lines = [f"cost index={k} name={name} calls={images} ticks={ticks[k]}"
           for k, name in enumerate(ops)]
  for name in dict.fromkeys(ops):
    same = [k for k, other in enumerate(ops) if other == name]
    lines.append(f"cost_type name={name} ops={len(same)} "
                 f"ticks={sum(ticks[k] for k in same)}")
  return lines


def set_field(text: str, kind: str, index, key: str, value) -> str:
  """`text` with field `key` of the `kind` record for image `index` (its index= or
  image= field; None: every such record) set to `value` (or value(old value))."""
  out, hit = [], False
  for line in text.splitlines():
    parts = line.split()
    if parts and parts[0] == kind and (index is None or f"index={index}" in parts
                                       or f"image={index}" in parts):
      parts = [p if not p.startswith(key + "=") else
               f"{key}={value(p[len(key) + 1:]) if callable(value) else value}"
               for p in parts]
      hit = True
      line = " ".join(parts)
    out.append(line)
  assert hit, (kind, index, key)
  return "\n".join(out) + "\n"


def line_of(text: str, prefix: str) -> int:
  """The 1-based number of the first line of `text` starting with `prefix`."""
  return next(k for k, line in enumerate(text.splitlines(), 1) if line.startswith(prefix))
