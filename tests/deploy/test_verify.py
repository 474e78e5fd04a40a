"""forge_tflm verify-device and the PPK2 integration on synthetic logs and captures
with known answers (no build, no dataset)."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from forge_tflm.cli.main import main as cli
from forge_tflm.deploy import ppk2
from forge_tflm.deploy.export import load_expected
from forge_tflm.deploy.verify import verify

from forge_tflm.testing.device_logs import (BOOT, N, OPS_REPEATED, app_log as _log,
                                      expected_doc as _expected, line_of, set_field)


def test_bit_exact_log_verifies_and_reports_accuracy_and_time():
  exp = _expected()
  v = verify(_log(exp), exp)
  assert v.ok and v.identical == N and v.first_divergence is None
  assert v.compared == ["logits", "pred", "FORGE outputs", "FORGE state", "every op"]
  labels = np.array([e["label"] for e in exp["per_image"]])
  assert v.accuracy_expected == pytest.approx(np.mean([e["pred"] for e in exp["per_image"]]
                                                      == labels))
  assert v.accuracy_source == pytest.approx(0.0)  # pred_source = label + 1
  text = v.markdown()
  assert "BIT-EXACT" in text and "10.000 ms" in text  # 2.4M cycles at 240 MHz
  assert "| FORGE_RECALIB | 1 | 2.500 | 25.0% |" in text


def test_log_from_an_app_with_the_old_fc_guard_field_still_verifies():
  """Apps built before the ESP-NN FC guard's removal printed fc_guard=G in the header
  (docs/decisions/esp-nn-fc-guard.md); their logs parse and verify as before."""
  exp = _expected()
  old = re.sub(r"^(forge_app .*)$", r"\1 fc_guard=1", _log(exp), count=1, flags=re.M)
  assert " fc_guard=1" in old
  v = verify(old, exp)
  assert v.ok and v.identical == N and not v.problems


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
  assert v.first_divergence.startswith("image 2: FORGE op 1 state differs (device "
                                        "deadbeef, expected 00000066)")


def test_truncated_log_is_reported_not_raised():
  exp = _expected()
  text = _log(exp, images=3)
  text += "img index=3 pred=1 logits=-4,12,-1"  # the capture stopped mid-line
  v = verify(text, exp)
  assert not v.ok and v.images_logged == 3 and v.identical == 3
  # The cut record is the fourth image the device ran; it is listed as malformed.
  assert any("ends after 4 of 5 images" in p for p in v.problems)
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


def test_error_with_prose_is_reported_as_printed_not_as_malformed():
  """esp32s3_platform.cc prints prose after its fields ("(needs PSRAM: ...)")."""
  exp = _expected()
  text = _log(exp, images=2) + ("error what=arena_alloc bytes=600000 (needs PSRAM: enable "
                                "CONFIG_SPIRAM on a board that has it)\n")
  v = verify(text, exp)
  assert not v.ok and not any("malformed" in p for p in v.problems), v.problems
  assert any("what=arena_alloc bytes=600000 (needs PSRAM: enable CONFIG_SPIRAM" in p
             for p in v.problems), v.problems


def test_error_before_the_header_is_named_not_called_another_capture():
  """ForgeAppRun's Fail() before the header (an arena too small for the model: the
  real host app's output with --arena=4096) says what failed."""
  exp = _expected()
  text = (f"{BOOT}\nerror what=allocate_tensors\ndone images=0 status=error ticks=0\n")
  with pytest.raises(ValueError, match="error before it ran any image: what=allocate_tensors"):
    verify(text, exp)


# -------------------------------------------- every printed field is compared


def _other_class(old: str) -> str:
  return str((int(old) + 1) % 10)


def _bump_logit(k: int):
  def bump(old: str) -> str:
    v = old.split(",")
    v[k] = str(int(v[k]) + (1 if int(v[k]) < 127 else -1))
    return ",".join(v)
  return bump


def _flip_hex(old: str) -> str:
  v = old.split(",")
  v[-1] = f"{int(v[-1], 16) ^ 1:08x}"
  return ",".join(v)


# case: (mode, record, image, field, new value or old -> new, what the verdict names)
ONE_FIELD = {
    "pred": ("adapt", "img", 2, "pred", _other_class, ["image 2", "pred"]),
    "logit": ("adapt", "img", 3, "logits", _bump_logit(7), ["image 3", "logits", "class 7"]),
    "forge_checksum": ("adapt", "img", 1, "forge", _flip_hex, ["image 1", "FORGE op 1 output"]),
    "state_checksum": ("adapt", "img", 4, "state", _flip_hex, ["image 4", "FORGE op 1 state"]),
    "op_checksum": ("adapt", "img", 0, "trace", _flip_hex,
                    ["image 0", "op 3 (FULLY_CONNECTED) output"]),
    "gated_pred": ("gated", "img", 3, "pred", _other_class, ["image 3", "pred"]),
    "header_input_bytes": ("adapt", "forge_app", None, "input_bytes", "3073",
                           ["header (line 2)", "input_bytes=3073"]),
    "header_output": ("adapt", "forge_app", None, "output", "1x11",
                      ["header (line 2)", "output=1x11"]),
    "header_mode": ("adapt", "forge_app", None, "mode", "frozen", ["mode=frozen"]),
    "op_forge_flag": ("adapt", "op", 2, "forge", "1", ["forge=1 on ops [1, 2]"]),
    # Issue 53: these verified before the mem line was compared.
    "mem_arena_size": ("adapt", "mem", None, "arena_size", "1024",
                       ["arena_used=90000 > arena_size=1024"]),
    "mem_states": ("adapt", "mem", None, "states", "0", ["states=0", "1 FORGE ops"]),
    "done_images": ("adapt", "done", None, "images", str(N - 1), [f"images={N - 1}"]),
    # Issue 53: these verified before the mem, cost and cost_type lines were compared
    # field by field (done ticks was compared already).
    "mem_forge_state": ("adapt", "mem", None, "forge_state", "136",
                        ["mem line: forge_state=136", "128 state bytes"]),
    "mem_forge_persistent": ("adapt", "mem", None, "forge_persistent", "100",
                             ["mem line: forge_persistent=100 < forge_state=128"]),
    "cost_calls_unequal": ("adapt", "cost", 2, "calls", str(N - 1),
                           [f"calls={N - 1}..{N} differ between ops"]),
    "cost_calls_not_images": ("adapt", "cost", None, "calls", str(N + 1),
                              [f"calls={N + 1} for images={N} in mode=adapt"]),
    "gated_cost_calls_over_two_passes": ("gated", "cost", None, "calls", str(2 * N + 1),
                                         [f"calls={2 * N + 1} for images={N} in mode=gated"]),
    "done_ticks": ("adapt", "done", None, "ticks", lambda v: str(int(v) + 1),
                   ["ticks=12000011", "the img records sum to 12000010"]),
    "gated_path": ("gated", "img", 3, "path", "frozen", ["image 3", "path"]),
    "gate_decision": ("gated", "gate", 1, "decision", "off", ["image 1", "decision"]),
    "gate_score": ("gated", "gate", 1, "score_e6", lambda v: str(int(v) + 1000),
                   ["image 1", "score"]),
    "gate_agreement": ("gated", "gate", N - 1, "agreement_e6",
                       lambda v: str(int(v) - 5), ["image 4", "agreement"]),
    "gate_chance": ("gated", "gate", 1, "chance_e6", lambda v: str(-int(v)),
                    ["image 1", "chance"]),
    "gate_correlated": ("gated", "gate", 1, "correlated", "1",
                        ["image 1", "label correlation"]),
}


@pytest.mark.parametrize("case", sorted(ONE_FIELD))
def test_one_field_differing_is_not_verified_and_named(tmp_path, capsys, case):
  """A genuine log with exactly one field of one record changed: NOT VERIFIED, exit
  status 1, the report names the image and the field (pred was never compared)."""
  mode, kind, image, key, value, names = ONE_FIELD[case]
  exp = _expected(mode)
  genuine = _log(exp)
  assert verify(genuine, exp).ok
  text = set_field(genuine, kind, image, key, value)
  _assert_not_verified(text, genuine, exp, names)
  (tmp_path / "expected.json").write_text(json.dumps(exp))
  (tmp_path / "device.log").write_text(text)
  assert cli(["forge_tflm", "verify-device", str(tmp_path / "device.log"),
              f"--expected={tmp_path}"]) == 1
  assert "NOT VERIFIED" in capsys.readouterr().out


def _edit_line(kind: str, name: str, key: str, value):
  """The `kind` record naming `name`: field `key` set to value(old value)."""
  def edit(text: str) -> str:
    out = re.sub(rf"^({kind} (?:\S+ )*name={name} (?:.* )?{key}=)(\d+)",
                 lambda m: m.group(1) + value(m.group(2)), text, count=1, flags=re.M)
    assert out != text, (kind, name, key)
    return out
  return edit


def _move_line(prefix: str, before: str):
  """The line starting with `prefix` moved to just before the one starting `before`."""
  def edit(text: str) -> str:
    lines = text.splitlines()
    moved = lines.pop(line_of(text, prefix) - 1)
    lines.insert(next(k for k, line in enumerate(lines) if line.startswith(before)), moved)
    return "\n".join(lines) + "\n"
  return edit


def _repeat_line(prefix: str):
  return lambda t: _add_lines(t, prefix, [t.splitlines()[line_of(t, prefix) - 1]])


# case: the log from the genuine one of OPS_REPEATED (adapt) -> what the report names.
# Issue 53: each verified BIT-EXACT before (verify-device read neither the cost_type
# values nor the number of mem and cost_type lines).
DERIVED = {
    "cost_type_ops": (_edit_line("cost_type", "CONV_2D", "ops", lambda v: "1"),
                      ["cost_type line for CONV_2D: ops=1", "cost lines give ops=2"]),
    "cost_type_ticks": (_edit_line("cost_type", "FORGE_RECALIB", "ticks",
                                   lambda v: str(int(v) - 1)),
                        ["cost_type line for FORGE_RECALIB: ops=2 ticks=5999999",
                         "ticks=6000000"]),
    "cost_ticks": (_edit_line("cost", "MEAN", "ticks", lambda v: str(int(v) + 7)),
                   ["cost_type line for MEAN: ops=1 ticks=3000000", "ticks=3000007"]),
    "cost_type_order": (_move_line("cost_type name=ADD ", "cost_type name=CONV_2D "),
                        ["first-seen order"]),
    "cost_type_twice": (_repeat_line("cost_type name=MEAN "),
                        ["6 cost_type lines", "one per op name"]),
    "cost_lines_swapped": (_move_line("cost index=3 ", "cost index=2 "),
                           ["cost line 3 of 7: index=3", "in order"]),
    "mem_twice": (_repeat_line("mem "), ["2 mem lines"]),
    "mem_missing": (lambda t: t.replace(t.splitlines()[line_of(t, "mem ") - 1] + "\n", ""),
                    ["0 mem lines"]),
    "mem_without_forge_state": (lambda t: re.sub(r" forge_state=\d+", "", t),
                                ["mem line: no forge_state= or states= field"]),
    "mem_without_states": (lambda t: re.sub(r" states=\d+", "", t),
                           ["mem line: no forge_state= or states= field"]),
}


def test_cost_type_lines_of_repeated_op_names_verify():
  """One cost_type line per op name in first-seen order, as PrintCosts prints it."""
  exp = _expected(ops=OPS_REPEATED)
  text = _log(exp)
  assert "cost_type name=CONV_2D ops=2 ticks=6000000" in text
  assert "mem arena_size=131072 arena_used=90000 forge_persistent=600 forge_scratch=4480 " \
         "forge_state=256 states=2" in text
  v = verify(text, exp)
  assert v.ok, v.markdown()
  assert "| CONV_2D | 2 |" in v.markdown()


@pytest.mark.parametrize("case", sorted(DERIVED))
def test_a_field_the_app_derives_differing_is_not_verified_and_named(case):
  make, names = DERIVED[case]
  exp = _expected(ops=OPS_REPEATED)
  genuine = _log(exp)
  _assert_not_verified(make(genuine), genuine, exp, names)


def _assert_not_verified(text: str, genuine: str, exp: dict, names) -> None:
  """The tampered log `text` is NOT VERIFIED, its report naming each of `names`."""
  assert text != genuine
  v = verify(text, exp)
  report = v.markdown()
  assert not v.ok and "NOT VERIFIED" in report
  for name in names:
    assert name in report, (name, report)


@pytest.mark.parametrize("mode,calls", [("adapt", 0), ("gated", 0), ("gated", N + 2),
                                        ("gated", 2 * N)])
def test_cost_calls_the_app_can_print_verify(mode, calls):
  """All ops' calls equal: 0 (a TFLM without the profiler's calls prints 0 calls and
  ticks), or in a gated run up to two invokes per image (a probe runs two passes)."""
  exp = _expected(mode)
  text = set_field(_log(exp), "cost", None, "calls", str(calls))
  if calls == 0:
    text = re.sub(r"^(cost(?:_type)? .*ticks=)\d+$", r"\g<1>0", text, flags=re.M)
  v = verify(text, exp)
  assert v.ok, v.markdown()


def test_cost_calls_of_a_run_that_failed_midway_are_not_held_to_the_images():
  """An invoke that fails runs only the ops before the failing one: the error line
  and the done line's status say so; the cost lines' calls differ and are not named."""
  exp = _expected()
  text = _log(exp)
  text = set_field(text, "cost", 0, "calls", str(N + 1))
  text = set_field(text, "done", None, "status", "error")
  v = verify(text.replace("cost index=0 ", "error what=invoke image=5\ncost index=0 "), exp)
  assert not v.ok and any("what=invoke" in p for p in v.problems), v.problems
  assert not any("calls" in p for p in v.problems), v.problems


def test_fields_without_an_expectation_are_listed_as_not_compared():
  """A gated run prints FORGE checksums that expected.json (two passes per probed
  image) has no values for: the report says they were not compared."""
  exp = _expected("gated")
  v = verify(_log(exp), exp)
  assert v.ok, v.markdown()
  assert "not compared" in v.markdown() and "FORGE outputs" in v.markdown()


def _add_lines(text: str, after: str, lines: list[str]) -> str:
  out = []
  for line in text.splitlines():
    out.append(line)
    if line.startswith(after):
      out += lines
  return "\n".join(out) + "\n"


def _reset_mid_run(text: str) -> str:
  """The capture holds a board reset after image 2 and the whole run again."""
  cut = text.index("img index=3 ")
  return (text[:cut] + "Guru Meditation Error: Core  0 panic'ed (LoadProhibited)\n"
          "Rebooting...\nESP-ROM:esp32s3-20210327\nrst:0xc (RTC_SW_CPU_RST),boot:0x8 "
          "(SPI_FAST_FLASH_BOOT)\n" + text)


# case: mode, the log from the genuine one, what the one line or the report names
MALFORMED = {
    "checksum_over_32_bits": ("adapt", lambda t: set_field(t, "img", 1, "forge", "1ffffffff"),
                              ["line 9", "forge"]),
    "logit_out_of_int8": ("adapt", lambda t: set_field(t, "img", 1, "logits",
                                                       lambda v: "200" + v[v.index(","):]),
                          ["line 9", "logits"]),
    "tensor_value_out_of_int8": ("adapt", lambda t: _add_lines(t, "img index=0 ", [
        "tensor image=0 op=2 offset=0 bytes=4 values=1,2,300,4"]), ["line 9", "values"]),
    "ticks_30_digits": ("adapt", lambda t: set_field(t, "img", 1, "ticks", "9" * 30),
                        ["line 9", "ticks"]),
    "done_ticks_30_digits": ("adapt", lambda t: set_field(t, "done", None, "ticks", "9" * 30),
                             ["ticks"]),
    "tensor_bytes_1e12": ("adapt", lambda t: _add_lines(t, "img index=0 ", [
        f"tensor image=0 op=2 offset=0 bytes={10**12} values=1"]), ["line 9", "bytes"]),
    "too_many_forge_checksums": ("adapt", lambda t: set_field(t, "img", None, "forge",
                                                              lambda v: v + ",00000000"),
                                 ["image 0", "2 FORGE output checksums, expected 1"]),
    "too_few_forge_checksums": ("adapt", lambda t: set_field(t, "img", None, "forge", ""),
                                ["image 0", "0 FORGE output checksums, expected 1"]),
    "too_few_op_checksums": ("adapt", lambda t: set_field(t, "img", None, "trace",
                                                          lambda v: v[:v.rindex(",")]),
                             ["image 0", "3 op output checksums, expected 4"]),
    "gate_decision_unknown": ("gated", lambda t: set_field(t, "gate", N - 1, "decision",
                                                           "maybe"), ["decision"]),
    "board_reset": ("adapt", _reset_mid_run, ["reset", "line"]),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_log_is_one_line_or_a_named_problem(tmp_path, capsys, case):
  """Never a traceback: a one-line error or NOT VERIFIED naming the line and field;
  never "op None (?)" nor "another model" for a log of this model."""
  mode, make, names = MALFORMED[case]
  exp = _expected(mode)
  (tmp_path / "expected.json").write_text(json.dumps(exp))
  (tmp_path / "device.log").write_text(make(_log(exp)))
  assert cli(["forge_tflm", "verify-device", str(tmp_path / "device.log"),
              f"--expected={tmp_path}"]) == 1
  captured = capsys.readouterr()
  assert "Traceback" not in captured.err and len(captured.err.splitlines()) <= 1
  said = captured.out + captured.err
  assert "NOT VERIFIED" in said or captured.err
  for name in names:
    assert name in said, (name, said)
  for wrong in ("None", "(?)", "another model"):
    assert wrong not in said, said


def test_line_numbers_in_the_malformed_cases_are_those_of_the_log():
  text = _log(_expected())
  assert line_of(text, "img index=1 ") == 9  # MALFORMED names "line 9"
  assert line_of(_add_lines(text, "img index=0 ", ["tensor x"]), "tensor") == 9


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


HEAD = "Timestamp(ms),Current(uA),D0-D7\n"


@pytest.mark.parametrize("rows,why", [
    (["0,1,00000001", "0.01,nan,00000001"], "line 3: current 'nan' is not a finite number"),
    (["0,1,00000001", "0.01,inf,00000001"], "line 3: current 'inf' is not a finite number"),
    (["0,1,00000001", "0.01,-Infinity,00000001"], "line 3: current"),
    (["0,1,00000001", "nan,1,00000001"], "line 3: timestamp 'nan' is not a finite number"),
    (["inf,1,00000001", "0.01,1,00000001"], "line 2: timestamp 'inf'"),
    (["0,1,00000001", "0.01,-3.5,00000001"], "line 3: negative current -3.5"),
    (["0,1,00000001", "0.01,1,00000001", "0.01,1,00000001"], "line 4: timestamp 0.01 is"
     " not increasing"),
])
def test_ppk2_non_finite_or_negative_samples_are_refused_with_the_line(rows, why):
  with pytest.raises(ValueError, match=re.escape(why)) as e:
    ppk2.read_capture(HEAD + "\n".join(rows) + "\n", is_text=True)
  assert "\n" not in str(e.value)


def test_ppk2_unclosed_quote_is_one_line(tmp_path):
  """A quote opened and never closed swallows the rest of the file into one field
  (past the csv module's 128 KiB field limit in a real capture)."""
  path = _capture(str(tmp_path / "c.csv"))
  with open(path) as f:
    lines = f.read().splitlines(keepends=True)
  lines[3] = lines[3].replace(",", ',"', 1)
  (tmp_path / "q.csv").write_text("".join(lines))
  with pytest.raises(ValueError, match=r"line 4: .*quote") as e:
    ppk2.read_capture(str(tmp_path / "q.csv"))
  assert "\n" not in str(e.value)


def test_ppk2_export_with_extra_columns_reads_its_channels(tmp_path):
  """Extra columns beside the channels (other app versions) are ignored; a header
  with no channel column names what it has."""
  plain = ppk2.phase_energy(ppk2.read_capture(_capture(str(tmp_path / "c.csv"))), 3.3)
  text = (tmp_path / "c.csv").read_text().splitlines()
  extra = ["Timestamp(ms),Current(uA),D0-D7,Voltage(mV)"] + [t + ",3300" for t in text[1:]]
  (tmp_path / "x.csv").write_text("\n".join(extra) + "\n")
  pe = ppk2.phase_energy(ppk2.read_capture(str(tmp_path / "x.csv")), 3.3)
  np.testing.assert_array_equal(pe.total_j, plain.total_j)
  np.testing.assert_array_equal(pe.forge_j, plain.forge_j)
  with pytest.raises(ValueError, match="no digital channels.*'Voltage\\(mV\\)'"):
    ppk2.read_capture("Timestamp(ms),Current(uA),Voltage(mV)\n0,1,3300\n0.01,1,3300\n",
                      is_text=True)


def test_ppk2_energy_that_overflows_is_refused():
  cap = ppk2.read_capture(HEAD + "0,0,00000000\n1e300,1e300,00000001\n2e300,1,00000000\n"
                          "3e300,1,00000000\n", is_text=True)
  with pytest.raises(ValueError, match="not finite"):
    ppk2.phase_energy(cap, 3.3)
  with pytest.raises(ValueError, match="supply voltage"):
    ppk2.phase_energy(cap, float("inf"))


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


@pytest.mark.parametrize("mode,edit,field", [
    ("adapt", lambda d: d["per_image"][1].pop("pred"), "per_image[1] has no label or pred"),
    ("adapt", lambda d: d.update(images=7), "per_image does not hold images=7"),
    ("adapt", lambda d: d["per_image"][2].update(logits=[0, 300]), "per_image[2].logits"),
    ("adapt", lambda d: d["per_image"][0].update(trace=["12345678", 5]), "per_image[0].trace"),
    ("gated", lambda d: d["gate"]["decisions"][1].update(score="high"), "gate.decisions[1]"),
])
def test_load_expected_names_a_hand_edited_field(tmp_path, capsys, mode, edit, field):
  """An expected.json edited by hand: one line naming the file and the field, not a
  traceback (a missing pred) nor a verdict against values it cannot hold."""
  exp = _expected(mode)
  (tmp_path / "device.log").write_text(_log(exp))
  edit(exp)
  (tmp_path / "expected.json").write_text(json.dumps(exp))
  with pytest.raises(ValueError, match=re.escape(field)):
    load_expected(str(tmp_path))
  assert cli(["forge_tflm", "verify-device", str(tmp_path / "device.log"),
              f"--expected={tmp_path}"]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "expected.json" in err[0] and field in err[0], err
