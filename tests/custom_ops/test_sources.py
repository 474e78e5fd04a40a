"""The op's sources are listed once (custom_ops/forge_recalib/sources.txt) and every
build reads that list: the Make builds, the CMake component, setup.py and, by the
same rule as a glob, Bazel."""

import glob
import os
import re

from tests.conftest import REPO_ROOT

OP = os.path.join(REPO_ROOT, "custom_ops", "forge_recalib")
BUILDS = ["esp32s3_app/host/Makefile", "esp32s3_app/cortexm/Makefile",
          "esp32s3_app/esp32s3/Makefile", "custom_ops/forge_recalib/micro/Makefile",
          "custom_ops/forge_recalib/test/cortexm/Makefile",
          "custom_ops/forge_recalib/test/esp32s3/Makefile",
          "custom_ops/forge_recalib/CMakeLists.txt", "setup.py"]
# An op source named in a build file's code (comments aside; tests are not op sources).
NAMED = re.compile(r"\bforge_recalib(?:_(?!test\b)[a-z0-9]+)*\.(?:c|cc)\b")


def _listed() -> list[str]:
  with open(os.path.join(OP, "sources.txt")) as f:
    return f.read().split()


def _code(path: str) -> str:
  comment = "#"
  with open(os.path.join(REPO_ROOT, path)) as f:
    return "\n".join(line.split(comment, 1)[0] for line in f)


def test_the_list_names_every_source_once():
  listed = _listed()
  assert len(listed) == len(set(listed))
  on_disk = {os.path.relpath(p, OP) for p in glob.glob(os.path.join(OP, "src", "*.c*"))}
  on_disk.add("micro/forge_recalib_kernel.cc")
  assert set(listed) == on_disk


def test_every_build_reads_the_list_and_names_no_source_itself():
  for path in BUILDS:
    code = _code(path)
    assert "sources.txt" in code or "sources.mk" in code, (
        f"{path} does not read the op's sources.txt (or sources.mk, which reads it)")
    assert not NAMED.findall(code), f"{path} names {NAMED.findall(code)} itself"


def test_the_make_fragment_reads_the_list():
  assert "$(FORGE_RECALIB_DIR)/sources.txt" in _code("custom_ops/forge_recalib/sources.mk")


def test_bazel_core_glob_is_the_lists_c_files():
  build = _code("custom_ops/forge_recalib/BUILD")
  assert 'glob(["src/*.c"])' in build
  core = {p for p in _listed() if p.endswith(".c")}
  assert core == {os.path.relpath(p, OP) for p in glob.glob(os.path.join(OP, "src", "*.c"))}
  assert all(p.startswith("src/") for p in core)


def test_no_c_file_includes_another():
  for path in glob.glob(os.path.join(OP, "**", "*.c*"), recursive=True):
    with open(path) as f:
      included = re.findall(r'^\s*#\s*include\s+"([^"]+\.(?:c|cc))"', f.read(), re.M)
    assert not included, f"{os.path.relpath(path, REPO_ROOT)} includes {included}"


def test_the_packaged_component_keeps_every_listed_source():
  """The component manager packs the folder minus idf_component.yml's exclusions; its
  CMakeLists compiles every file of sources.txt (the x86 variant was excluded once)."""
  with open(os.path.join(OP, "idf_component.yml")) as f:
    text = f.read()
  excluded = re.findall(r'^\s+- "([^"]+)"', text.split("exclude:", 1)[1], re.M)
  kept_out = [p for p in _listed() + ["sources.txt"]
              if any(p == e or p.startswith(e.rstrip("/") + "/") for e in excluded)]
  assert not kept_out, f"idf_component.yml excludes {kept_out}"
