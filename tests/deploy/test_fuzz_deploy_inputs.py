"""Mutation fuzz of verify-device's inputs in CI (issue 34): 10,000 mutants of the
genuine device logs and 10,000 of the PPK2 captures (forge_tflm/testing/deploy_fuzz.py),
each through the code the CLI runs on it. No exception but the one-line ValueError,
no report line over several lines, no log verified BIT-EXACT whose compared fields
differ from the genuine log's, no capture accepted with an energy that is not finite
and >= 0. About 1 ms of CPU per mutant (20 s on an idle core);
benchmarks/fuzz_deploy_inputs.py runs 100,000 of each
(benchmarks/results/fuzz_deploy_inputs.txt).
"""


from forge_tflm.testing import deploy_fuzz as df
from forge_tflm.testing import device_logs
from tests.conftest import fuzz_slice

MUTANTS = fuzz_slice(10_000)


def _describe(findings):
  return "\n".join(f"#{r['index']} {r['seed']}/{r['mutator']}: {r['desc']} -> "
                   f"{r['outcome']}: {r['message'][:400]}" for r in findings[:10])


def test_the_seeds_pass_and_the_oracle_sees_one_changed_field():
  logs = df.log_seeds()
  for name, seed in logs.items():
    assert df.check_log(seed[0], seed, name == "gated") == ("verified", "")
  for data in df.csv_seeds().values():
    assert df.check_csv(data) == ("accepted", "")
  genuine = logs["adapt"][0].decode()
  changed = device_logs.set_field(genuine, "img", 2, "pred", "9")
  assert df.contradicts(changed, genuine, gated=False)
  assert df.check_log(changed.encode(), logs["adapt"], False)[0] == "not_verified"
  timing = device_logs.set_field(genuine, "img", 2, "ticks", "7")
  assert df.contradicts(timing, genuine, gated=False) is None


def test_fuzz_device_logs_and_ppk2_captures():
  summary = df.fuzz(MUTANTS)
  for what, mutators, seeds in (("log", df.LOG_MUTATORS, {"adapt", "gated"}),
                                ("csv", df.CSV_MUTATORS, {"bits", "columns"})):
    s = summary[what]
    counts = s["counts"]
    assert sum(counts.values()) == MUTANTS, counts
    assert not s["findings"], (f"{len(s['findings'])} {what} mutants failed ({counts}):\n"
                               + _describe(s["findings"]))
    assert set(s["by_mutator"]) == set(mutators) and set(s["by_seed"]) == seeds
  # The mix stays meaningful: most mutants are refused, a good share still passes.
  log, csv = summary["log"]["counts"], summary["csv"]["counts"]
  assert log.get("not_verified", 0) + log.get("rejected", 0) > MUTANTS // 2, log
  assert log.get("verified", 0) > MUTANTS // 50 and log.get("rejected", 0) > MUTANTS // 50
  assert csv.get("rejected", 0) > MUTANTS // 2 and csv.get("accepted", 0) > MUTANTS // 20, csv
