"""The front page and the documentation: every relative link resolves, the README
stays a front page."""

import glob
import os
import re

from tests.conftest import REPO_ROOT

README_MAX_LINES = 160
# [text](target) outside code spans; images too. The target ends at whitespace or ')'.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_FENCE = re.compile(r"^(```|~~~)")


def _doc_files():
  files = [os.path.join(REPO_ROOT, "README.md")]
  files += sorted(glob.glob(os.path.join(REPO_ROOT, "docs", "**", "*.md"), recursive=True))
  return files


def _relative_links(path):
  """(line number, target) of every relative link in a Markdown file."""
  links, in_fence = [], False
  with open(path) as f:
    for number, line in enumerate(f, 1):
      if _FENCE.match(line.strip()):
        in_fence = not in_fence
        continue
      if in_fence:
        continue
      for target in _LINK.findall(_CODE_SPAN.sub("", line)):
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
          links.append((number, target))
  return links


def test_docs_exist():
  files = _doc_files()
  assert len(files) > 1, "docs/ holds no Markdown pages"


def test_every_relative_link_resolves_to_a_file_without_an_anchor():
  broken = []
  for path in _doc_files():
    rel = os.path.relpath(path, REPO_ROOT)
    for number, target in _relative_links(path):
      if "#" in target:
        broken.append(f"{rel}:{number}: {target} (anchor: link the file, anchors break"
                      " silently when a heading changes)")
        continue
      resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
      if not os.path.exists(resolved):
        broken.append(f"{rel}:{number}: {target} does not exist")
  assert not broken, "\n".join(broken)


def test_readme_is_a_front_page():
  with open(os.path.join(REPO_ROOT, "README.md")) as f:
    lines = f.read().splitlines()
  assert len(lines) <= README_MAX_LINES, (
      f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/")


def test_link_finder_sees_links_and_skips_code(tmp_path):
  page = tmp_path / "page.md"
  page.write_text("[a](x.md) `[b](y.md)` [c](https://e.org)\n```\n[d](z.md)\n```\n"
                  "![img](p.png)\n")
  assert _relative_links(str(page)) == [(1, "x.md"), (5, "p.png")]


def test_every_decision_page_is_in_the_decisions_index():
  folder = os.path.join(REPO_ROOT, "docs", "decisions")
  index = {os.path.normpath(os.path.join(folder, t))
           for _, t in _relative_links(os.path.join(folder, "README.md"))}
  pages = {p for p in glob.glob(os.path.join(folder, "*.md"))
           if os.path.basename(p) != "README.md"}
  assert not sorted(pages - index), sorted(os.path.basename(p) for p in pages - index)
