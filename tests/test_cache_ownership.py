"""The cache removes only what traceagent wrote: a directory it did not make (a home, a cache other
tools share) is never cleared, evicted, written or read, and inside its own directory only
entries that are ours by name and contents go."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from builder import TraceBuilder

from traceagent.cli import main
from traceagent.trace import cache


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _fake_home(root: Path) -> Path:
    home = root / "home"
    for folder, name, text in ((".ssh", "id_ed25519", b"PRIVATE KEY"), ("Documents", "thesis.tex", b"\\begin"),
                               ("projects", "train.py", b"import torch")):
        (home / folder).mkdir(parents=True)
        (home / folder / name).write_bytes(text)
    return home


def _trace(path: Path, kernel: str = "gemm") -> Path:
    b = TraceBuilder()
    for i in range(20):
        b.kernel(kernel, i * 100, 50)
    return b.write(path)


def test_cache_clear_in_a_home_directory_removes_nothing_and_says_why(tmp_path, monkeypatch, capsys):
    home = _fake_home(tmp_path)
    before = _tree(home)
    monkeypatch.setenv("TRACEAGENT_CACHE_DIR", str(home))
    assert main(["cache", "clear"]) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and str(home) in line and "not traceagent's cache" in line and "nothing was removed" in line
    assert _tree(home) == before and (home / ".ssh").is_dir()


def test_analyze_with_the_cache_in_a_home_directory_neither_writes_nor_evicts_there(tmp_path, monkeypatch, capsys):
    home = _fake_home(tmp_path)
    before = _tree(home)
    monkeypatch.setenv("TRACEAGENT_CACHE_DIR", str(home))
    monkeypatch.setenv("TRACEAGENT_CACHE_MAX", "1")  # a cap every folder there is over
    trace = _trace(tmp_path / "t.json")
    assert main(["analyze", str(trace), "--json"]) == 0  # the analysis goes on, uncached, and says so
    assert "is not traceagent's cache" in capsys.readouterr().err
    assert _tree(home) == before and sorted(os.listdir(home)) == [".ssh", "Documents", "projects"]
    assert main(["cache", "info"]) == 0
    assert "not traceagent's cache" in capsys.readouterr().out


def test_a_shared_cache_folder_keeps_other_tools_folders_under_a_small_cap(tmp_path, monkeypatch):
    shared = tmp_path / ".cache"
    (shared / "pip" / "http").mkdir(parents=True)
    (shared / "pip" / "http" / "blob").write_bytes(b"x" * 10_000)
    before = _tree(shared)
    monkeypatch.setenv("TRACEAGENT_CACHE_DIR", str(shared))
    monkeypatch.setenv("TRACEAGENT_CACHE_MAX", "100")
    assert main(["analyze", str(_trace(tmp_path / "t.json")), "--json"]) == 0
    assert _tree(shared) == before


def test_a_new_cache_directory_is_marked_and_only_our_entries_are_removed(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("TRACEAGENT_CACHE_DIR", str(directory))
    assert main(["analyze", str(_trace(tmp_path / "t.json")), "--json"]) == 0
    assert cache.owned(directory) and len(cache.entries()) == 1
    # named like an entry but not ours inside, a link named like one, and a stranger's file
    impostor = directory / ("a" * 24)
    impostor.mkdir()
    (impostor / "notes.txt").write_text("mine")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "gpu.frame").write_text("not a cache")
    (directory / ("b" * 24)).symlink_to(elsewhere, target_is_directory=True)
    (directory / "README").write_text("left by someone")
    monkeypatch.setenv("TRACEAGENT_CACHE_MAX", "1")
    assert main(["analyze", str(_trace(tmp_path / "u.json", "other")), "--json"]) == 0  # evicts what is ours
    assert main(["cache", "clear"]) == 0
    assert (impostor / "notes.txt").read_text() == "mine" and (elsewhere / "gpu.frame").exists()
    assert sorted(os.listdir(directory)) == sorted([cache.MARKER, "a" * 24, "b" * 24, "README"])


def test_a_cache_from_before_the_mark_is_adopted(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("TRACEAGENT_CACHE_DIR", str(directory))
    main(["analyze", str(_trace(tmp_path / "t.json")), "--json"])
    (directory / cache.MARKER).unlink()  # as an older version left it: entries only
    assert main(["cache", "clear"]) == 0
    assert os.listdir(directory) == [cache.MARKER]


@pytest.mark.parametrize("text", [b"Signature: 8a477f597d28d172789f06886806bc55\n# another tool's cache\n", b"hello"])
def test_a_mark_written_by_another_tool_is_not_ours(tmp_path, monkeypatch, text):
    directory = tmp_path / "cache"
    directory.mkdir()
    (directory / cache.MARKER).write_bytes(text)
    (directory / ("c" * 24)).mkdir()
    monkeypatch.setenv("TRACEAGENT_CACHE_DIR", str(directory))
    assert main(["cache", "clear"]) == 2
    assert (directory / ("c" * 24)).is_dir()
