"""select pass: all, none, names (model order kept), unknown names."""

import numpy as np
import pytest

from forge_tflm.converter.select import select_sites
from forge_tflm.converter.sites import ConversionError
from tests.converter import handmade

_FOUND = [handmade.site_for(np.ones((2, 1, 1, 2)), n) for n in ("a", "b", "c")]


def test_all_none_and_names_in_model_order():
  assert select_sites(_FOUND, "all") == _FOUND
  assert select_sites(_FOUND, "none") == []
  assert [s.name for s in select_sites(_FOUND, ("c", "a"))] == ["a", "c"]


def test_unknown_names_listed_with_the_model_sites():
  with pytest.raises(ConversionError, match=r"unknown site\(s\) x, y; .* a, b, c"):
    select_sites(_FOUND, ("a", "x", "y"))


@pytest.mark.parametrize("text, message", [
    # Issue 34: deep nesting was a RecursionError traceback.
    ("[" * 100000 + "]" * 100000, r"not JSON we read \(nested more than 64 levels\)"),
    ('{"sites": ["a" "b"]}', r"not JSON \(Expecting ',' delimiter"),
    ('{"sites": "a,b"}', r"expected a JSON list of site names"),
    ('{"sites": ["a", 3]}', r"expected a JSON list of site names"),
    ('{"sites": ["a", "a"]}', r"site 'a' is listed twice"),
    ('{"sites": ["a"], "sites": ["b"]}', r"key 'sites' appears twice"),
    ("", r"not JSON \(Expecting value"),
], ids=["deep_nesting", "not_json", "not_a_list", "not_strings", "repeated_site",
        "repeated_key", "empty"])
def test_a_bad_sites_file_is_one_line_naming_it(tmp_path, text, message):
  from forge_tflm.cli.convert_cmd import parse_sites

  path = tmp_path / "sites.json"
  path.write_text(text)
  with pytest.raises(ValueError) as e:
    parse_sites(f"@{path}")
  msg = str(e.value)
  assert "\n" not in msg and str(path) in msg, msg
  assert __import__("re").search(message, msg), msg


def test_a_missing_sites_file_is_named(tmp_path):
  from forge_tflm.cli.convert_cmd import parse_sites

  with pytest.raises(FileNotFoundError, match=f"sites file {tmp_path / 'no.json'} does"
                                              " not exist"):
    parse_sites(f"@{tmp_path / 'no.json'}")
  (tmp_path / "ok.json").write_text('{"sites": ["b", "a"], "k": 2}')
  assert parse_sites(f"@{tmp_path / 'ok.json'}") == ("b", "a")


def test_a_large_sites_file_is_read_in_linear_time(tmp_path):
  """Issue 53: the repeat check called list.count per name (quadratic: a 1 MB file of
  100,000 distinct names hung convert for minutes). Now one pass; a file over the size
  limit is refused before it is read."""
  from forge_tflm.cli.convert_cmd import parse_sites
  from forge_tflm.fileio import MAX_SETTINGS_JSON_BYTES

  names = [f"s{i}" for i in range(90_000)]
  path = tmp_path / "big.json"
  path.write_text(__import__("json").dumps(names))
  assert path.stat().st_size < MAX_SETTINGS_JSON_BYTES
  assert parse_sites(f"@{path}") == tuple(names)
  path.write_text(" " * MAX_SETTINGS_JSON_BYTES + "[]")
  with pytest.raises(ValueError, match=r"big.json: 1,048,578 bytes, more than the"
                                       r" 1,048,576 a file of this kind can be"):
    parse_sites(f"@{path}")


def test_many_unknown_names_give_a_short_line():
  """A sites file of 100,000 unknown names made a 1 MB error line; names that are not
  printable (a newline) split it."""
  wanted = ("a",) + tuple(f"x{i}" for i in range(100_000)) + ("bad\nname",)
  with pytest.raises(ConversionError) as e:
    select_sites(_FOUND, wanted)
  msg = str(e.value)
  assert msg.startswith("unknown site(s) x0, x1, x2, x3, x4 and 99,996 more;"), msg[:200]
  assert len(msg) < 300 and "\n" not in msg
  with pytest.raises(ConversionError, match=r"unknown site\(s\) 'bad\\nname'; "):
    select_sites(_FOUND, ("bad\nname",))
