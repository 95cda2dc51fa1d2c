"""A run started from a checkout with uncommitted changes records them: ``code.patch`` beside ``provenance.json``
(its size and SHA-256 in the record) rebuilds the files the run imported from the recorded commit, and the untracked
files of the source folders are named. Checked on real temporary git repositories, the patch applied by git itself."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ragen_core.training import provenance
from ragen_core.training.provenance import write_provenance
from ragen_core.training.report import RESUME_LOG, record_resume

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

#: A binary file: NUL bytes and every byte value, which a text diff cannot carry.
BLOB = bytes(range(256)) * 4


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def _files(root: Path) -> dict[str, bytes]:
    """Every file under `root` but git's own folder, by its path from `root` (a plain walk, not git)."""
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            path = Path(folder) / name
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


@pytest.fixture
def repo(tmp_path) -> Path:
    """A committed project: a source folder `pkg` with text, binary and oddly named files, a file outside it."""
    repo = tmp_path / "project"
    (repo / "pkg").mkdir(parents=True)
    _git(tmp_path, "init", "-q", str(repo))
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "pkg" / "a.py").write_text("x = 1\ny = 2\n")
    (repo / "pkg" / "blob.bin").write_bytes(BLOB)
    (repo / "pkg" / "gone.py").write_text("old = True\n")
    (repo / "pkg" / "name with spaces é.py").write_text("z = 0")  # no newline at its end
    (repo / "notes.txt").write_text("outside the source folder\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "init")
    return repo


def _edit(repo: Path) -> None:
    """Uncommitted changes of every kind: edited text and binary files, a deleted one, a staged new one, an edit
    outside the source folder; and untracked files (one ignored, one outside the source folder)."""
    (repo / "pkg" / "a.py").write_text("x = 10\ny = 2\n")
    (repo / "pkg" / "blob.bin").write_bytes(BLOB[::-1] + b"\x00\xff")
    (repo / "pkg" / "gone.py").unlink()
    (repo / "pkg" / "name with spaces é.py").write_text("z = 1")
    (repo / "pkg" / "staged.py").write_text("new = 1\n")
    _git(repo, "add", "pkg/staged.py")
    (repo / "notes.txt").write_text("edited\n")
    (repo / "pkg" / "sub").mkdir()
    (repo / "pkg" / "sub" / "draft.py").write_text("draft = 1\n")
    (repo / "pkg" / "debug.log").write_text("ignored\n")
    (repo / "scratch.py").write_text("outside\n")


def test_the_patch_rebuilds_the_files_the_run_imported(repo, tmp_path, monkeypatch):
    _edit(repo)
    # A user's git config must not change what is written: no a/ b/ prefixes, colours, an external diff tool.
    for i, (key, value) in enumerate([("diff.noprefix", "true"), ("color.diff", "always"),
                                      ("diff.external", "false")]):
        monkeypatch.setenv(f"GIT_CONFIG_KEY_{i}", key)
        monkeypatch.setenv(f"GIT_CONFIG_VALUE_{i}", value)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "3")
    run = tmp_path / "run"
    run.mkdir()
    record = write_provenance(run, "x = 1\n", source=[repo / "pkg"])
    assert json.loads((run / "provenance.json").read_text()) == record
    patch = run / "code.patch"
    data = patch.read_bytes()
    assert record["commit"] == _git(repo, "rev-parse", "HEAD") and record["dirty"] is True
    assert record["patch"] == {"file": "code.patch", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    # Named, never copied: the untracked files of the source folder, not the ignored one, not one outside it.
    assert record["untracked"] == ["pkg/sub/draft.py"] and record["untracked_count"] == 1
    assert b"draft = 1" not in data

    for i in range(3):
        monkeypatch.delenv(f"GIT_CONFIG_KEY_{i}")
        monkeypatch.delenv(f"GIT_CONFIG_VALUE_{i}")
    monkeypatch.delenv("GIT_CONFIG_COUNT")
    rebuilt = tmp_path / "rebuilt"
    _git(tmp_path, "clone", "-q", str(repo), str(rebuilt))
    _git(rebuilt, "checkout", "-q", record["commit"])
    _git(rebuilt, "apply", "--check", str(patch))
    _git(rebuilt, "apply", str(patch))
    expected = {name: body for name, body in _files(repo).items()
                if name not in ("pkg/sub/draft.py", "pkg/debug.log", "scratch.py")}
    assert _files(rebuilt) == expected


def test_a_clean_checkout_writes_no_patch_and_removes_one_left_by_an_earlier_start(repo, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _edit(repo)
    assert write_provenance(run, "", source=[repo / "pkg"])["patch"]["file"] == "code.patch"
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "edits")
    # The restart of that run (it stopped before its first checkpoint) from the committed code.
    record = write_provenance(run, "", source=[repo / "pkg"])
    assert (record["dirty"], record["patch"], record["untracked"], record["untracked_count"]) == (False, None, [], 0)
    assert not (run / "code.patch").exists()


def test_an_installed_package_records_no_patch(tmp_path):
    installed = tmp_path / "site-packages" / "pkg"
    installed.mkdir(parents=True)
    (installed / "a.py").write_text("x = 1\n")
    run = tmp_path / "run"
    run.mkdir()
    record = write_provenance(run, "", source=[installed])
    assert {k: record[k] for k in ("commit", "dirty", "patch", "untracked", "untracked_count")} == dict.fromkeys(
        ("commit", "dirty", "patch", "untracked", "untracked_count"))
    assert sorted(p.name for p in run.iterdir()) == ["provenance.json"]


def test_a_patch_above_the_limit_is_named_by_its_digest_only(repo, tmp_path, monkeypatch):
    _edit(repo)
    whole, small = tmp_path / "whole", tmp_path / "small"
    whole.mkdir()
    small.mkdir()
    full = write_provenance(whole, "", source=[repo / "pkg"])["patch"]
    data = (whole / "code.patch").read_bytes()
    monkeypatch.setattr(provenance, "PATCH_LIMIT", len(data) - 1)
    record = write_provenance(small, "", source=[repo / "pkg"])
    assert record["patch"] == {"file": None, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                               "too_large": True}
    assert full["sha256"] == record["patch"]["sha256"]
    assert sorted(p.name for p in small.iterdir()) == ["provenance.json"]  # nothing partial left behind


def test_a_resume_records_its_own_uncommitted_changes(repo, tmp_path, monkeypatch):
    """A resume may run other changes than the start: the resume log names its own patch file, by its digest."""
    monkeypatch.setattr(provenance, "source_folders", lambda: [repo / "pkg"])
    run = tmp_path / "run"
    run.mkdir()
    _edit(repo)
    record_resume(run, 3, {})
    (entry,) = [json.loads(line) for line in (run / RESUME_LOG).read_text().splitlines()]
    data = (run / entry["patch"]["file"]).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    assert entry["patch"] == {"file": f"code-{digest[:12]}.patch", "bytes": len(data), "sha256": digest}
    assert (entry["commit"], entry["dirty"]) == (_git(repo, "rev-parse", "HEAD"), True)
    assert entry["untracked"] == ["pkg/sub/draft.py"]
    rebuilt = tmp_path / "rebuilt"
    _git(tmp_path, "clone", "-q", str(repo), str(rebuilt))
    _git(rebuilt, "apply", str(run / entry["patch"]["file"]))
    assert (rebuilt / "pkg" / "blob.bin").read_bytes() == (repo / "pkg" / "blob.bin").read_bytes()
