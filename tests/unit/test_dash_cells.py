"""The dashboard's cells built from data: a worktree's name cell, here and on another host."""

from chtop_tasks.dash import model, remote
from chtop_tasks.hosts.records import Host


def test_a_venv_whose_build_did_not_finish_marks_the_name_here_and_on_a_host():
    assert model.name_cell("dev", "incomplete") == "dev !venv"
    assert model.name_cell("dev", "missing") == "dev" == model.name_cell("dev", "complete")
    state = remote.RemoteState(Host("gpu1", "gpu1", "/top", "python3"), asked=True, worktrees=[
        {"name": "dev", "root": "/ch/dev", "venv": "incomplete", "problem": None, "repos": []},
        {"name": "feat", "root": "/ch/feat", "venv": "missing", "problem": None, "repos": []}])
    rows = remote.worktree_rows(state, ["alpha"], 0.0)
    assert [(key, cells[1]) for key, cells in rows] == [("gpu1:dev", "dev !venv"), ("gpu1:feat", "feat")]
