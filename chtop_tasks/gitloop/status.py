"""Read-only git across every repo of a workspace: status, diff, and how each feature branch
stands to its integration branch.

The fan-out runs in a bounded thread pool and prints in manifest order.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import runner
from ..core.errors import ChtopError, CommandFailed
from ..core.fanout import fan_out
from ..core.gitprobe import (
    REVIEW_DIFF_OPTS,
    REVIEW_ENV,
    REVIEW_GIT_OPTS,
    WORKTREE_DIFF_DRIVERS_OFF,
    WORKTREE_SUBMODULES,
    ahead_behind,
    ambiguous_short_name,
    head_branch,
)
from ..core.gitrun import git
from ..core.term import bold, git_color_args, say, warn
from ..stores.quarantine import SHA_RE, read_ref, store_of, sync_worktree
from ..workspace.layout import Checkout, Workspace, verify_git_dirs
from .landing import hidden_pinned_warnings, review_marks


def present_checkouts(ws: Workspace) -> list[Checkout]:
    """The checkouts that exist; absent ones are warned about."""
    result = []
    for checkout in ws.checkouts():
        if checkout.path.exists():
            result.append(checkout)
        else:
            warn(f"{ws.display(checkout.path)} is missing (run `inv toplevel.init` in the toplevel)")
    return result


@dataclass
class RepoOutput:
    checkout: Checkout
    header: str
    text: str
    returncode: int


def run_in_checkout(ws: Workspace, checkout: Checkout, args: list[str], review: bool = False) -> RepoOutput:
    """``review``: a diff that shows content as text whatever the attributes say (a feature
    worktree's, whose attribute files are the agent's)."""
    command, rest = args[0], args[1:]
    guard = [] if ws.is_toplevel else [WORKTREE_SUBMODULES]
    if command == "diff" and not ws.is_toplevel:
        guard += WORKTREE_DIFF_DRIVERS_OFF
    opts, env = [], None
    if review and not ws.is_toplevel:
        opts, env, guard = list(REVIEW_GIT_OPTS), REVIEW_ENV, guard + list(REVIEW_DIFF_OPTS)
    result = git(checkout.path, [*git_color_args(), *opts, command, *guard, *rest], check=False, env=env)
    # the header names the command as asked (chtop's guards above are always added)
    header = f"==== {ws.display(checkout.path)}  [{runner.format_command(['git', *args], checkout.path)}]"
    return RepoOutput(checkout, header, result.stdout + result.stderr, result.returncode)


def synced_and_verified(ws: Workspace, strict: bool = False, on_verified=None) -> None:
    """The agent's latest commits imported, then every checkout's ``.git`` checked to point where the
    layout says.  The private stores were walked for planted links and FIFOs by the import itself,
    under the worktree's lock, just before: a second walk would close no race, so this check reads only the pointers.  ``on_verified``: called once, as soon as
    every checkout's git dir has been checked (while the import runs, when there is one)."""
    called = []

    def verified() -> None:
        called.append(True)
        on_verified()

    sync_worktree(ws, strict=strict, on_verified=verified if on_verified is not None else None)
    verify_git_dirs(ws, walk=False)
    if on_verified is not None and not called:
        on_verified()


def fan_out_git(ws: Workspace, args: list[str]) -> list[RepoOutput]:
    synced_and_verified(ws)
    return fan_out(lambda c: run_in_checkout(ws, c, args), present_checkouts(ws))


def print_outputs(outputs: list[RepoOutput], hide_empty: bool) -> int:
    shown = 0
    for out in outputs:
        if hide_empty and not out.text.strip() and out.returncode == 0:
            continue
        shown += 1
        say(bold(out.header))
        say(out.text.rstrip("\n"))
    return shown


def worst_status(outputs) -> int:
    return max((o.returncode for o in outputs), default=0)


@dataclass
class Relation:
    checkout: Checkout
    branch: str | None
    integration: str
    ahead: int
    behind: int
    expected_branch: str

    @property
    def off_branch(self) -> bool:
        return self.branch != self.expected_branch


def relation_of(ws: Workspace, checkout: Checkout) -> Relation:
    """How the checkout's branch stands to its integration branch."""
    integ = ws.integration_branch(checkout)
    branch = head_branch(checkout.path)
    expected = integ if ws.is_toplevel else ws.name
    if ws.is_toplevel:
        return Relation(checkout, branch, integ, 0, 0, expected)
    if at_integration_tip(ws, checkout, branch, integ):
        return Relation(checkout, branch, integ, 0, 0, expected)
    ahead, behind = ahead_behind(checkout.path, integ)
    return Relation(checkout, branch, integ, ahead, behind, expected)


def at_integration_tip(ws: Workspace, checkout: Checkout, branch: str | None, integ: str) -> bool:
    """Whether the feature checkout's branch and its integration branch name one commit in its
    private store (a worktree just made or rebased with no commits of its own), read as data: then
    ``rev-list`` would count nothing either way.  Where ``integ`` could name another ref to git (a
    tag of that name, ...), or a ref is not a plain sha, git is asked."""
    if branch is None:
        return False
    store = store_of(ws, checkout)
    tip = read_ref(store, f"refs/heads/{branch}")
    return (tip is not None and SHA_RE.match(tip) is not None and read_ref(store, f"refs/heads/{integ}") == tip
            and not ambiguous_short_name(checkout.path, integ))


def relations(ws: Workspace) -> list[Relation]:
    return fan_out(lambda c: relation_of(ws, c), present_checkouts(ws))


def describe_relation(ws: Workspace, rel: Relation) -> str | None:
    """One line for a worktree repo that is not up to date, else None."""
    if rel.ahead == 0 and rel.behind == 0:
        return None
    here = ws.display(rel.checkout.path)
    top = ws.display(ws.main_checkout_dir(rel.checkout))
    return f"{here} is {relation_words(rel.ahead, rel.behind)} {top} ({rel.integration} branch)"


def relation_words(ahead: int, behind: int) -> str:
    """``1 commit ahead of, 2 behind``: the parts that are not zero."""
    def commits(n: int) -> str:
        return f"{n} commit{'s' if n != 1 else ''}"
    if ahead and behind:
        return f"{commits(ahead)} ahead of, {behind} behind"
    return f"{commits(ahead)} ahead of" if ahead else f"{commits(behind)} behind"


def off_branch_warnings(ws: Workspace, rels: list[Relation]) -> list[str]:
    lines = []
    for rel in rels:
        if rel.off_branch:
            actual = f"branch {rel.branch!r}" if rel.branch else "a detached HEAD"
            lines.append(
                f"{ws.display(rel.checkout.path)} is on {actual}, expected {rel.expected_branch!r}"
            )
    return lines


def relations_block(ws: Workspace, rels: list[Relation]) -> list[str]:
    if ws.is_toplevel:
        return []
    lines = [line for rel in rels if (line := describe_relation(ws, rel))]
    if not lines:
        return [f"{ws.name}: all {len(rels)} repos up to date with their integration branches"]
    return lines


def git_status(ws: Workspace, args: list[str]) -> int:
    outputs = fan_out_git(ws, ["status", *args])
    print_outputs(outputs, hide_empty=False)
    hidden = [] if ws.is_toplevel else hidden_pinned_in(ws)
    for line in hidden:
        warn(line)
    rels = relations(ws)
    say()
    for line in relations_block(ws, rels):
        say(line)
    for line in off_branch_warnings(ws, rels):
        warn(line)
    if ws.is_toplevel:
        group_status(ws)
    else:
        for line in off_branch_warnings(ws, relations(ws.for_root(ws.toplevel))):
            warn(line)      # where merge-up lands: a toplevel repo on another branch
    return max(worst_status(outputs), 1 if hidden else 0)


def hidden_pinned_in(ws: Workspace) -> list[str]:
    """A feature worktree's pinned paths that its (agent-written) index hides from status."""
    return [line for lines in fan_out(lambda c: hidden_pinned_warnings(ws.display(c.path), c.path, not c.name),
                                      present_checkouts(ws)) for line in lines]


def group_status(top: Workspace) -> None:
    """In the toplevel: every worktree's relations to its integration branches, and its checkouts
    off their branch."""
    from ..workspace.layout import find_workspace
    from ..workspace.worktrees import worktree_roots

    for root in worktree_roots(top):
        try:
            wt = find_workspace(root)
            sync_worktree(wt)
            verify_git_dirs(wt)
            rels = relations(wt)
        except (ChtopError, OSError) as exc:
            warn(f"{top.display(root)}: {exc}")
            continue
        for line in relations_block(wt, rels):
            say(line)
        for line in off_branch_warnings(wt, rels):
            warn(line)


def git_diff(ws: Workspace, args: list[str]) -> int:
    outputs = fan_out_git(ws, ["diff", *args])
    shown = print_outputs(outputs, hide_empty=True)
    if not shown:
        say(f"no differences in {len(outputs)} repos")
    return worst_status(outputs)


def git_diff_integration(ws: Workspace, args: list[str]) -> int:
    """Each repo's work against its own integration branch (``git diff --merge-base BRANCH``): what
    the feature changed, not what the integration branch gained since."""
    synced_and_verified(ws)
    outputs = fan_out(lambda c: marked(ws, c, run_in_checkout(ws, c, ["diff", "--merge-base",
                                                                       ws.integration_branch(c), *args], review=True)),
                      present_checkouts(ws))
    if not print_outputs(outputs, hide_empty=True):
        say(f"no differences against the integration branches in {len(outputs)} repos")
    return worst_status(outputs)


def marked(ws: Workspace, checkout: Checkout, out: RepoOutput) -> RepoOutput:
    """``out`` of a review diff, with a warning line first for each pinned path or attribute file
    the branch changes since it left its integration branch (as git compares the trees, whatever
    the index says)."""
    if ws.is_toplevel:
        return out
    try:
        marks = review_marks(ws.main_checkout_dir(checkout), ws.integration_branch(checkout),
                             f"refs/heads/{ws.name}", not checkout.name)
    except CommandFailed as exc:
        marks = [f"!! cannot compare the branch's trees with its integration branch's: {exc}"]
    if not marks:
        return out
    return RepoOutput(checkout, out.header, "".join(f"{bold(line)}\n" for line in marks) + out.text, out.returncode)
