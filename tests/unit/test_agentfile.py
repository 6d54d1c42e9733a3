"""``agentfile``: the one reader of files an agent can write (no links, no blocking, regular files,
bounded), on real FIFOs, links and files, and the host readers that use it."""

from __future__ import annotations

import os
import time

from chtop_tasks.core import agentfile
from chtop_tasks.venv import uvcache


def test_a_regular_file_is_read_and_anything_else_is_absent(tmp_path):
    plain, fifo, link, big = (tmp_path / n for n in ("plain", "fifo", "link", "big"))
    plain.write_text("ref: refs/heads/dev\n")
    os.mkfifo(fifo)
    link.symlink_to(plain)
    big.write_bytes(b"x" * 101)
    started = time.monotonic()
    assert agentfile.read_text(plain) == "ref: refs/heads/dev\n"
    assert agentfile.read_text(fifo) is None            # a plain open() would block here for good
    assert agentfile.read_text(link) is None            # never followed, even to a harmless file
    assert agentfile.read_bytes(big, limit=100) is None and agentfile.read_bytes(big, limit=101) == b"x" * 101
    assert agentfile.read_text(tmp_path) is None and agentfile.read_text(tmp_path / "missing") is None
    assert time.monotonic() - started < 5
    assert [agentfile.non_regular(p) for p in (plain, fifo, link, tmp_path / "missing")] == [
        None, "a FIFO", "a symlink", None]


def test_venv_build_reads_a_planted_fifo_pyproject_as_missing(tmp_path):
    os.mkfifo(tmp_path / "pyproject.toml")
    assert uvcache.build_requirement_names(tmp_path) == {"setuptools"}
