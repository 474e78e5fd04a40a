"""forge_tflm.fileio: written files follow the umask; output directories are checked
before any work."""

import os
import stat

import numpy as np
import pytest

from forge_tflm import fileio


@pytest.fixture
def umask():
  """Sets the process umask for one test and restores it."""
  saved = os.umask(0o022)
  os.umask(saved)
  yield lambda mask: os.umask(mask)
  os.umask(saved)


def _mode(path) -> int:
  return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002, 0o077])
def test_written_files_follow_the_umask(tmp_path, umask, mask):
  # mkstemp creates its files 0600: before the fix every output was 0600.
  umask(mask)
  fileio.write_atomically({str(tmp_path / "a.json"): b"{}", str(tmp_path / "b.csv"): b"x"})
  with fileio.atomic_path(str(tmp_path / "c.npy"), ".npy") as tmp:
    np.save(tmp, np.zeros(3))
  with open(tmp_path / "plain", "w") as f:  # What a normal open() gives.
    f.write("x")
  expected = 0o666 & ~mask
  assert _mode(tmp_path / "plain") == expected
  for name in ("a.json", "b.csv", "c.npy"):
    assert _mode(tmp_path / name) == expected, name
  assert not [n for n in os.listdir(tmp_path) if n.startswith(".forge_tmp_")]


def test_current_umask_reads_without_changing_it(umask):
  umask(0o027)
  assert fileio.current_umask() == 0o027 and fileio.current_umask() == 0o027


def test_overwriting_a_file_gives_the_umask_mode_too(tmp_path, umask):
  path = tmp_path / "results.json"
  path.write_text("old")
  os.chmod(path, 0o600)
  umask(0o022)
  fileio.write_atomically({str(path): b"new"})
  assert path.read_text() == "new" and _mode(path) == 0o644


def test_check_output_dir_accepts_existing_and_creatable_dirs(tmp_path):
  fileio.check_output_dir(str(tmp_path))
  fileio.check_output_dir(str(tmp_path / "new" / "deeper"))
  assert not (tmp_path / "new").exists()  # Checked, not created.
  assert os.listdir(tmp_path) == []  # The probe file is gone.


def test_check_output_dir_refuses_files_and_paths_under_files(tmp_path):
  f = tmp_path / "results.json"
  f.write_text("{}")
  with pytest.raises(NotADirectoryError, match=f"{f} exists and is not a directory"):
    fileio.check_output_dir(str(f), "--output_dir")
  with pytest.raises(NotADirectoryError, match=f"{f} is not a directory"):
    fileio.check_output_dir(str(f / "sub"))
  with pytest.raises(ValueError, match="empty path"):
    fileio.check_output_dir("")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_check_output_dir_refuses_a_read_only_dir(tmp_path):
  ro = tmp_path / "ro"
  ro.mkdir()
  os.chmod(ro, 0o555)
  try:
    with pytest.raises(PermissionError, match="not writable"):
      fileio.check_output_dir(str(ro / "out"), "--output_dir")
  finally:
    os.chmod(ro, 0o755)


def test_check_output_dir_refuses_an_unwritable_filesystem():
  # Even root cannot create files in /proc: an unwritable directory for any user.
  if not os.path.isdir("/proc/self"):
    pytest.skip("needs /proc")
  with pytest.raises(OSError, match="/proc/self/out"):
    fileio.check_output_dir("/proc/self/out", "--output_dir")
