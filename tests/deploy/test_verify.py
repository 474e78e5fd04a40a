"""forge_tflm verify-device and the PPK2 integration on synthetic logs and captures
with known answers (no build, no dataset)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from forge_tflm.cli.main import main as cli
from forge_tflm.deploy import ppk2
from forge_tflm.deploy.export import EXPECTED_VERSION, load_expected
from forge_tflm.deploy.verify import verify

OPS = ["CONV_2D", "FORGE_RECALIB", "MEAN", "FULLY_CONNECTED"]
N = 5


def _expected() -> dict:
  rng = np.random.default_rng(0)
  per = []
  for n in range(N):
    logits = rng.integers(-128, 128, 10).tolist()
    per.append({"index": n, "label": n % 10, "pred": int(np.argmax(logits)),
                "pred_source": (n + 1) % 10, "logits": logits,
                "forge": [f"{n + 1:08x}"], "state": [f"{n + 100:08x}"],
                "trace": [f"{n * 4 + k:08x}" for k in range(4)]})
  return {"version": EXPECTED_VERSION, "model_bytes": 1234, "ops": OPS, "forge_ops": [1],
          "images": N, "mode": "adapt", "per_image": per}


def _log(exp: dict, *, images=None, trace=True, mutate=None, model_bytes=None) -> str:
  per = exp["per_image"]
  lines = ["I (312) boot: ESP-IDF v5.3 2nd stage bootloader",  # noise is ignored
           f"forge_app version=1 model_bytes={model_bytes or exp['model_bytes']} ops=4 "
           "forge_ops=1 input=1x32x32x3 input_bytes=3072 output=1x10 clock_hz=240000000 "
           f"mode=adapt trace={'all' if trace else 'none'} fc_guard=1"]
  lines += [f"op index={k} name={name} forge={int(name == 'FORGE_RECALIB')}"
            for k, name in enumerate(OPS)]
  lines.append("mem arena_size=131072 arena_used=90000 forge_persistent=300 "
               "forge_scratch=4480 forge_state=128 states=1")
  n_img = N if images is None else images
  for n in range(n_img):
    e = dict(per[n])
    if mutate:
      e = mutate(n, e)
    rec = (f"img index={n} pred={int(np.argmax(e['logits']))} "
           f"logits={','.join(map(str, e['logits']))} ticks={2_400_000 + n}")
    if trace:
      rec += f" forge={','.join(e['forge'])} state={','.join(e['state'])} " \
             f"trace={','.join(e['trace'])}"
    lines.append(rec)
  if images is None:
    lines += [f"cost index={k} name={name} calls={N} ticks={N * 600_000}"
              for k, name in enumerate(OPS)]
    lines += [f"cost_type name={name} ops=1 ticks={N * 600_000}" for name in OPS]
    lines.append(f"done images={N} status=ok ticks={N * 2_400_000}")
  return "\n".join(lines) + "\n"


def test_bit_exact_log_verifies_and_reports_accuracy_and_time():
  exp = _expected()
  v = verify(_log(exp), exp)
  assert v.ok and v.identical == N and v.first_divergence is None
  assert v.compared == ["logits", "FORGE outputs", "FORGE state", "every op"]
  labels = np.array([e["label"] for e in exp["per_image"]])
  assert v.accuracy_expected == pytest.approx(np.mean([e["pred"] for e in exp["per_image"]]
                                                      == labels))
  assert v.accuracy_source == pytest.approx(0.0)  # pred_source = label + 1
  text = v.markdown()
  assert "BIT-EXACT" in text and "10.000 ms" in text  # 2.4M cycles at 240 MHz
  assert "| FORGE_RECALIB | 1 | 2.500 | 25.0% |" in text


def test_one_wrong_logit_is_the_first_divergence():
  exp = _expected()

  def bump(n, e):
    if n == 3:
      e = dict(e, logits=list(e["logits"]))
      e["logits"][7] = e["logits"][7] + (1 if e["logits"][7] < 127 else -1)
    return e

  v = verify(_log(exp, mutate=bump), exp)
  assert not v.ok and v.identical == N - 1
  assert v.first_divergence.startswith("image 3: logits differ (class 7:")


def test_a_forge_state_divergence_names_the_op():
  exp = _expected()
  v = verify(_log(exp, mutate=lambda n, e: dict(e, state=["deadbeef"]) if n == 2 else e), exp)
  assert v.first_divergence == "image 2: FORGE op 1 state differs"


def test_truncated_log_is_reported_not_raised():
  exp = _expected()
  text = _log(exp, images=3)
  text += "img index=3 pred=1 logits=-4,12,-1"  # the capture stopped mid-line
  v = verify(text, exp)
  assert not v.ok and v.images_logged == 3 and v.identical == 3
  assert any("ends after 3 of 5 images" in p for p in v.problems)
  assert any("malformed record" in p for p in v.problems)


def test_log_of_another_artifact_is_a_one_line_error():
  exp = _expected()
  with pytest.raises(ValueError, match="another model"):
    verify(_log(exp, model_bytes=999), exp)
  with pytest.raises(ValueError, match="no 'forge_app' line"):
    verify("garbage\nmore garbage\n", exp)


def test_error_line_from_the_app_is_reported():
  exp = _expected()
  text = _log(exp, images=0) + "error what=allocate_tensors\ndone images=0 status=error ticks=0\n"
  v = verify(text, exp)
  assert not v.ok and any("allocate_tensors" in p for p in v.problems)


# --------------------------------------------------------------------- PPK2

def _capture(path, *, layout="bits", rate=100_000, images=4, with_header=True):
  """A profile with known energy: idle 10 mA; per image 10 ms at 50 mA with the
  inference marker (D0) high, of which 2 ms (two 1 ms FORGE pulses, D1) at 80 mA."""
  dt = 1.0 / rate
  cur, d0, d1 = [], [], []

  def emit(ms, ma, m0, m1):
    for _ in range(round(ms * 1e-3 * rate)):
      cur.append(ma * 1e3)
      d0.append(m0)
      d1.append(m1)

  emit(5, 10, 0, 0)
  for _ in range(images):
    emit(3, 50, 1, 0)
    emit(1, 80, 1, 1)
    emit(3, 50, 1, 0)
    emit(1, 80, 1, 1)
    emit(2, 50, 1, 0)
    emit(5, 10, 0, 0)
  with open(path, "w") as f:
    if layout == "bits":
      f.write("Timestamp(ms),Current(uA),D0-D7\n" if with_header else "")
      for k, c in enumerate(cur):
        f.write(f"{k * dt * 1e3:.5f},{c:.3f},000000{d1[k]}{d0[k]}\n")
    else:
      f.write("Timestamp(ms),Current(uA),D0,D1,D2,D3,D4,D5,D6,D7\n")
      for k, c in enumerate(cur):
        f.write(f"{k * dt * 1e3:.5f},{c:.3f},{d0[k]},{d1[k]},0,0,0,0,0,0\n")
  return path


@pytest.mark.parametrize("layout", ["bits", "columns"])
def test_ppk2_energy_of_a_known_profile_within_0_1_percent(tmp_path, layout):
  cap = ppk2.read_capture(_capture(str(tmp_path / "c.csv"), layout=layout))
  pe = ppk2.phase_energy(cap, voltage=3.3)
  assert len(pe.total_j) == 4 and list(pe.forge_ops_per_image) == [2] * 4
  total = 3.3 * (0.050 * 0.008 + 0.080 * 0.002)
  forge = 3.3 * 0.080 * 0.002
  np.testing.assert_allclose(pe.total_j, total, rtol=1e-3)
  np.testing.assert_allclose(pe.forge_j, forge, rtol=1e-3)
  np.testing.assert_allclose(pe.inference_j, total - forge, rtol=1e-3)
  np.testing.assert_allclose(pe.total_s, 0.010, rtol=1e-3)
  np.testing.assert_allclose(pe.forge_s, 0.002, rtol=1e-3)
  table = ppk2.table10(pe)
  assert "| adapt overhead | 0.5280 ± 0.0000 | 2.000 ± 0.000 | 264.00 ± 0.00 |" in table


def test_ppk2_marker_edges_cut_by_the_capture_are_dropped():
  level = np.array([1, 1, 0, 0, 1, 1, 1, 0, 1, 0, 1, 1], bool)
  assert ppk2.high_intervals(level) == [(4, 7), (8, 9)]


@pytest.mark.parametrize("text,why", [
    ("", "empty"),
    ("time,amps\n1,2\n", "not a PPK2 export"),
    ("Timestamp(ms),Current(uA)\n0,1\n0.01,2\n", "no digital channels"),
    ("Timestamp(ms),Current(uA),D0-D7\n0,1,00000001\n0.01,x,00000001\n", "line 3"),
    ("Timestamp(ms),Current(uA),D0-D7\n0,1,0001\n0.01,1,00000001\n", "line 2"),
    ("Timestamp(ms),Current(uA),D0-D7\n0.02,1,00000000\n0.01,1,00000000\n", "not increasing"),
])
def test_ppk2_bad_input_is_a_one_line_error(text, why):
  with pytest.raises(ValueError, match=why):
    ppk2.read_capture(text, is_text=True)


def test_ppk2_without_marker_pulses_says_so():
  cap = ppk2.read_capture("Timestamp(ms),Current(uA),D0-D7\n0,1,00000000\n0.01,1,00000000\n",
                          is_text=True)
  with pytest.raises(ValueError, match="no complete pulse on D0"):
    ppk2.phase_energy(cap, 3.3)


# ----------------------------------------------------------------------- CLI

def test_cli_verify_device_end_to_end(tmp_path, capsys):
  exp = _expected()
  (tmp_path / "expected.json").write_text(json.dumps(exp))
  log = tmp_path / "device.log"
  log.write_text(_log(exp))
  csv_path = _capture(str(tmp_path / "ppk2.csv"), images=N)
  out_json = tmp_path / "verify.json"
  assert cli(["forge_tflm", "verify-device", str(log), f"--expected={tmp_path}",
              f"--ppk2={csv_path}", f"--json={out_json}"]) == 0
  text = capsys.readouterr().out
  assert "BIT-EXACT" in text and "| inference + adapt |" in text
  doc = json.loads(out_json.read_text())
  assert doc["ok"] and doc["identical"] == N and doc["energy"]["images"] == N


@pytest.mark.parametrize("case", ["missing_log", "bad_expected", "wrong_logit", "no_log_arg"])
def test_cli_verify_device_bad_inputs_exit_nonzero_with_one_line(tmp_path, capsys, case):
  exp = _expected()
  (tmp_path / "expected.json").write_text(json.dumps(exp))
  log = tmp_path / "device.log"
  log.write_text(_log(exp, mutate=lambda n, e: dict(e, logits=[0] * 10) if n == 0 else e))
  args = {"missing_log": [str(tmp_path / "nope.log"), f"--expected={tmp_path}"],
          "bad_expected": [str(log), f"--expected={log}"],
          "wrong_logit": [str(log), f"--expected={tmp_path}"],
          "no_log_arg": [f"--expected={tmp_path}"]}[case]
  assert cli(["forge_tflm", "verify-device"] + args) == 1
  captured = capsys.readouterr()
  assert "Traceback" not in captured.err
  if case != "wrong_logit":
    assert len(captured.err.strip().splitlines()) == 1, captured.err
  else:
    assert "NOT VERIFIED" in captured.out and "image 0: logits differ" in captured.out


def test_load_expected_rejects_other_versions(tmp_path):
  p = tmp_path / "expected.json"
  p.write_text(json.dumps({"version": 0}))
  with pytest.raises(ValueError, match="re-run forge_tflm export-firmware"):
    load_expected(str(p))
  os.remove(p)
  with pytest.raises(ValueError, match="cannot read"):
    load_expected(str(tmp_path))
