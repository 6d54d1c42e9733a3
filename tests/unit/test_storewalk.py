"""chtop_tasks.stores.storewalk: the planted-file walk re-reads only what changed, and still
finds every FIFO or link planted after it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from chtop_tasks.stores import storewalk


def made_store(tmp_path: Path) -> Path:
    store = tmp_path / ".chtop" / "git" / "dev" / "alpha.git"
    for number in range(40):
        obj = store / "objects" / f"{number:02x}"
        obj.mkdir(parents=True)
        (obj / ("a" * 38)).write_bytes(b"x")
    (store / "refs" / "heads").mkdir(parents=True)
    (store / "refs" / "heads" / "dev").write_text("0" * 40 + "\n")
    return store


def counted_reads(monkeypatch) -> list[str]:
    reads = []
    scandir = os.scandir
    monkeypatch.setattr(storewalk.os, "scandir", lambda path: reads.append(str(path)) or scandir(path))
    return reads


def test_a_walk_reads_again_only_the_directories_that_changed(tmp_path, monkeypatch):
    store = made_store(tmp_path)
    time.sleep(0.05)            # the kernel's coarse ctime ticks: later changes get another ctime
    monkeypatch.setattr(storewalk, "SETTLE_NS", 0)          # these dirs count as settled
    reads = counted_reads(monkeypatch)
    assert storewalk.planted_entry(store) is None and len(reads) == 44      # store, objects/, 40, refs, heads
    assert storewalk.walk_record_path(store) == tmp_path / ".chtop" / "walked" / "dev" / "alpha.git"
    reads.clear()
    assert storewalk.planted_entry(store) is None and reads == []
    os.mkfifo(store / "objects" / "07" / ("b" * 38))                         # planted after the walk
    assert storewalk.planted_entry(store) == (store / "objects" / "07" / ("b" * 38), "a FIFO")
    assert reads == [str(store / "objects" / "07")]
    (store / "objects" / "07" / ("b" * 38)).unlink()
    time.sleep(0.05)            # and the next walk begins a tick after this change
    assert storewalk.planted_entry(store) is None
    reads.clear()
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.rename(store / "refs" / "heads", tmp_path / "moved")
    (store / "refs" / "heads").symlink_to(target)                             # a directory made a link
    assert storewalk.planted_entry(store) == (store / "refs" / "heads", "a symlink")
    (store / "refs" / "heads").unlink()
    os.rename(tmp_path / "moved", store / "refs" / "heads")
    storewalk.walk_record_path(store).write_bytes(b"damaged")                  # a full walk again
    reads.clear()
    assert storewalk.planted_entry(store) is None and len(reads) == 44


def test_a_directory_changed_just_before_the_walk_is_read_again_next_time(tmp_path, monkeypatch):
    """A ctime within SETTLE_NS of the walk may not move for a change in the same clock tick: such a
    directory is never taken as known."""
    store = made_store(tmp_path)
    reads = counted_reads(monkeypatch)
    assert storewalk.planted_entry(store) is None
    reads.clear()
    assert storewalk.planted_entry(store) is None and len(reads) == 44
    outside = tmp_path / "plain" / "r.git"
    (outside / "objects").mkdir(parents=True)
    os.mkfifo(outside / "objects" / "f")
    assert storewalk.walk_record_path(outside) is None
    assert storewalk.planted_entry(outside) == (outside / "objects" / "f", "a FIFO")
