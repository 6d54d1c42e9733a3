"""The git that chtop runs on the host to land or move work (merge-up, rebase-down), attacked from
inside a real sandbox: it runs no driver the agent chose, writes through no link the agent planted,
and lands exactly the commits that were reviewed.

Each test gets its own workspace owned by the unprivileged test user (rootless podman).
"""

from __future__ import annotations

import pytest
from sandbox_helpers import user_group_cm

pytestmark = [pytest.mark.podman, pytest.mark.slow]


@pytest.fixture
def ug(remote_template):
    with user_group_cm(remote_template) as group:
        yield group


def add_user_config(g, text: str) -> None:
    """Append to the test user's own ~/.gitconfig (the config every host git of theirs reads)."""
    path = g.home / ".gitconfig"
    path.write_text(path.read_text() + text)


def test_merge_up_refuses_attributes_that_route_the_agents_files_through_a_configured_driver(ug):
    g = ug
    mark = g.base / "smudge-ran"
    add_user_config(g, f'[filter "x"]\n\tsmudge = touch {mark}; cat\n\tclean = cat\n')
    proc = g.sbox("cd alpha && echo '*.txt filter=x' > .gitattributes && echo data > new.txt && "
                  "git add .gitattributes new.txt && git commit -qm 'route files through x' && echo AGENT-DONE")
    assert "AGENT-DONE" in proc.stdout, proc.stdout + proc.stderr
    main = g.git(g.toplevel / "alpha", "rev-parse", "main")
    merge = g.inv("git.merge-up")
    assert merge.returncode == 3, merge.stdout + merge.stderr
    assert ".gitattributes" in merge.stderr and "filter=x" in merge.stderr, merge.stderr
    assert g.git(g.toplevel / "alpha", "rev-parse", "main") == main and not mark.exists()
    # the control: the same fast-forward by hand runs the driver the agent named
    g.git(g.toplevel / "alpha", "merge", "-q", "--ff-only", "dev")
    assert mark.exists()


def test_merge_up_lands_attributes_that_name_no_configured_driver(ug):
    g = ug
    proc = g.sbox("cd alpha && echo '*.py diff=python' > .gitattributes && git add .gitattributes && "
                  "git commit -qm 'diff patterns' && echo AGENT-DONE")
    assert "AGENT-DONE" in proc.stdout, proc.stdout + proc.stderr
    merge = g.inv("git.merge-up")
    assert merge.returncode == 0, merge.stdout + merge.stderr
    assert g.git(g.toplevel / "alpha", "log", "-1", "--format=%s", "main") == "diff patterns"
