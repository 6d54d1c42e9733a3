"""``git.merge-up``: each repo's feature branch landed on its integration branch in the toplevel, exactly
the tips that were checked (and, with ``--expect``, the ones the reviewed dry run showed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import CommandFailed, UsageError
from ..core.fanout import StartedLater, answered_before_leaving, fan_out, in_background
from ..core.gitprobe import (
    ahead_behind,
    dirty_paths,
    git_dir_as_data,
    head_branch,
    operation_in_progress,
    rev,
)
from ..core.gitrun import git
from ..core.term import say
from ..stores.quarantine import SHA_RE, read_ref
from ..workspace.grouplock import holds_group_lock
from ..workspace.layout import Checkout, Workspace, verify_git_dirs
from .landing import (
    Change,
    attribute_problems,
    changes_since_fork,
    git_quoted,
    pinned_path_problems,
)
from .status import Relation, present_checkouts, relation_of, synced_and_verified
from .steps import (
    GitStep,
    carry_out,
    dirty_paths_of,
    existing_checkout_dirs,
    preflight_problems,
    problems_of,
    raise_if_problems,
    refuse_in_toplevel,
)


def landed_on_integration(ws: Workspace, rel: Relation) -> str | None:
    """After a merge: the integration branch holds every commit of the feature branch."""
    if rel.ahead:
        return f"{rel.integration} still lacks {rel.ahead} commit(s) of {rel.branch}"
    return None


def relation_in_toplevel(ws: Workspace, checkout: Checkout, tips: dict[str, str] | None = None) -> Relation:
    """The feature branch (or its tip in ``tips``, the one merge-up landed) against its integration
    branch as the toplevel's store has them (where merge-up lands; a worktree's own copy of the
    integration branch is refreshed later).  Where the integration branch is that very tip (a
    fast-forward landed it), read as data from the toplevel's store, no git is asked."""
    integ = ws.integration_branch(checkout)
    tip = (tips or {}).get(checkout.name)
    if tip is not None and SHA_RE.match(tip) and read_ref(checkout.store, f"refs/heads/{integ}") == tip:
        return Relation(checkout, ws.name, integ, 0, 0, ws.name)
    ahead, behind = ahead_behind(ws.main_checkout_dir(checkout), integ, tip or ws.name)
    return Relation(checkout, ws.name, integ, ahead, behind, ws.name)


def merge_up_problems(ws: Workspace, rel: Relation, no_ff: bool, tip: str | None = None,
                      dirty: list[str] | None = None, allow_self_edit: bool = False,
                      changes: list[Change] | None = None) -> list[str]:
    """``tip``: the commit that lands (else branch NAME as it is now); ``dirty``: the checkout's
    ``dirty_paths``, when the caller has it already; ``allow_self_edit``: the user lets this landing
    change chtop's own files; ``changes``: ``landing_changes``, when the caller has them already."""
    problems = preflight_problems(ws, rel, dirty)
    if rel.ahead:
        problems += landing_branch_problems(ws, rel)
        problems += landing_tree_problems(ws, rel, tip or rel.branch or ws.name, allow_self_edit, "inv git.merge-up",
                                          changes)
    if rel.ahead and rel.behind and not no_ff:
        problems.append(
            f"{ws.display(rel.checkout.path)}: {rel.integration} moved ({rel.behind} new commit(s)) "
            f"since you rebased; run `inv git.rebase-down` and retry (or pass --no-ff for a merge commit)"
        )
    return problems


def landing_tree_problems(ws: Workspace, rel: Relation, tip: str, allow_self_edit: bool, again: str,
                          changes: list[Change] | None = None) -> list[str]:
    """What ``tip``'s trees may not carry onto ``rel``'s integration branch (``landing.py``): the
    pinned paths it changes since it left it (chtop's own files, what the host runs), attributes
    that hand files to your drivers; compared by git in the toplevel checkout where it lands.
    ``again``: the chtop command that lands it (``--allow-self-edit`` is added to it); ``changes``:
    ``landing_changes(ws, rel, tip)``, when the caller has it already."""
    main_dir = ws.main_checkout_dir(rel.checkout)
    where, by_hand = ws.display(rel.checkout.path), f"git -C {main_dir} merge --ff-only {tip}"
    changes = landing_changes(ws, rel, tip) if changes is None else changes
    return (pinned_path_problems(where, main_dir, changes, not rel.checkout.name, allow_self_edit, by_hand, again)
            + attribute_problems(where, main_dir, rel.integration, tip, changes, by_hand))


def landing_branch_problems(ws: Workspace, rel: Relation) -> list[str]:
    """The toplevel checkout where ``rel`` lands has another branch checked out (asked only where a
    merge lands)."""
    main_dir = ws.main_checkout_dir(rel.checkout)
    main_branch = head_branch(main_dir)
    if main_branch == rel.integration:
        return []
    return [f"{ws.display(main_dir)}: has {main_branch or 'a detached HEAD'} checked out, "
            f"but the merge lands on {rel.integration!r} there; check it out first"]


def landing_changes(ws: Workspace, rel: Relation, tip: str | None = None) -> list[Change]:
    """What the feature (``tip``, else branch NAME here) changed since it left its integration branch
    (what a merge changes), compared by git in the toplevel checkout where it lands: one ``git
    diff-tree`` from each merge base.  A rename is its two paths: the merge changes both, so the
    checks mind both."""
    return changes_since_fork(ws.main_checkout_dir(rel.checkout), rel.integration, tip or ws.name)


def landing_paths(ws: Workspace, rel: Relation, tip: str | None = None,
                  changes: list[Change] | None = None) -> set[str]:
    """``landing_changes``' paths as ``git status`` prints them in the toplevel checkout (quoted as
    git quotes a path, as ``dirty_paths`` shows them)."""
    changes = landing_changes(ws, rel, tip) if changes is None else changes
    return {git_quoted(change.path) for change in changes}


def toplevel_checkout_problems(ws: Workspace, rel: Relation, tip: str | None = None,
                               touched: set[str] | None = None, dirty: list[str] | None = None) -> list[str]:
    """What would stop the merge in ``rel``'s toplevel checkout (where it lands), asked before any
    repo moves: a leftover ``index.lock``, a merge or rebase in progress, uncommitted or untracked
    files where the merge changes them.  Repos with nothing to land are not asked.  ``tip``: the
    commit to land (another host's branch), else branch NAME here.  ``touched``:
    ``landing_paths(ws, rel, tip)``, when the caller has it already; ``dirty``: the toplevel
    checkout's ``dirty_paths``, when the caller has it already."""
    if not rel.ahead:
        return []
    main_dir = ws.main_checkout_dir(rel.checkout)
    here = ws.display(main_dir)
    problems = []
    gitdir = git_dir_as_data(main_dir) or Path(git(main_dir, ["rev-parse", "--absolute-git-dir"]).stdout.strip())
    if (gitdir / "index.lock").exists():
        problems.append(f"{here}: a leftover {gitdir / 'index.lock'} (a git still running there, or one that "
                        f"crashed); if none runs: rm {gitdir / 'index.lock'}")
    busy = operation_in_progress(main_dir, gitdir)
    if busy:
        problems.append(f"{here}: a {busy} is in progress; finish it or abort it (git -C {main_dir} {busy} --abort)")
    touched = landing_paths(ws, rel, tip) if touched is None else touched
    tracked, untracked = [], []
    for line in dirty_paths(main_dir, toplevel=True) if dirty is None else dirty:
        paths = set(line[3:].split(" -> "))
        if paths & touched:
            (untracked if line.startswith("??") else tracked).append(line[3:])
    if tracked:
        problems.append(f"{here}: uncommitted changes to {', '.join(tracked[:4])}, which the merge changes; "
                        f"commit or stash them there (git -C {main_dir} stash)")
    if untracked:
        problems.append(f"{here}: untracked {', '.join(untracked[:4])} would be overwritten by the merge; "
                        "move them away")
    return problems


def plan_merge_up(ws: Workspace, rels: list[Relation], no_ff: bool,
                  tips: dict[str, str] | None = None) -> list[GitStep]:
    """One merge per repo ahead, of its tip in ``tips`` (checkout name -> sha) when given: the commit
    checked and shown is the one merged, whatever is imported meanwhile."""
    steps = []
    for rel in rels:
        if rel.ahead == 0:
            continue
        main_dir = ws.main_checkout_dir(rel.checkout)
        tip = (tips or {}).get(rel.checkout.name)
        what = tip or rel.branch
        mode = ["--no-ff", "--no-edit"] if no_ff else ["--ff-only"]
        if no_ff and tip:
            mode = ["--no-ff", "-m", f"Merge branch '{rel.branch}'"]
        steps.append(GitStep(rel.checkout, main_dir, ["git", "merge", *mode, what],
                          f"{rel.ahead} commit(s) to land on {rel.integration}" + (f", up to {tip}" if tip else "")))
    return steps


CONTAINER_KEY = "@top"       # the container repo in --expect ('@' is not allowed in a repo name)


def tip_key(checkout: Checkout) -> str:
    return checkout.name or CONTAINER_KEY


def format_expect(ws: Workspace, tips: dict[str, str]) -> str:
    """``--expect``'s value for ``tips`` (checkout name -> sha), in manifest order."""
    return ",".join(f"{tip_key(c)}={tips[c.name]}" for c in ws.checkouts() if c.name in tips)


def parse_expect(ws: Workspace, text: str) -> dict[str, str]:
    """``REPO=SHA,...`` (``@top`` for the container repo) as checkout name -> sha; UsageError when bad."""
    names = {tip_key(c): c.name for c in ws.checkouts()}
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, sha = item.partition("=")
        if key not in names or not SHA_RE.match(sha):
            raise UsageError(f"--expect {text!r}: {item!r} is not REPO=SHA with REPO one of "
                             f"{', '.join(names)} and SHA a full commit id (copy the dry run's --expect line)")
        out[names[key]] = sha
    return out


@dataclass
class Landing:
    """One repo's relation; where it has commits to land, the imported tip that lands and what that
    tip changes since it left its integration branch (its changes, and their paths as git prints them)."""

    rel: Relation
    tip: str | None
    touched: set[str]
    changes: list[Change] = field(default_factory=list)


def landing_of(ws: Workspace, checkout: Checkout) -> Landing:
    """``checkout``'s relation and what lands (each repo's checks one after the other in one thread,
    while the other repos run theirs).  The commit checked is the one that lands: branch NAME's tip
    in the toplevel's store is read once, first, since the proxy's import (under the worktree's lock
    alone) may move it at any time meanwhile."""
    tip = read_ref(checkout.store, f"refs/heads/{ws.name}")
    tip = tip if tip and SHA_RE.match(tip) else None
    rel = relation_of(ws, checkout)
    if not rel.ahead:
        return Landing(rel, None, set())
    tip = tip or imported_tip(ws, checkout)
    changes = landing_changes(ws, rel, tip)
    return Landing(rel, tip, landing_paths(ws, rel, tip, changes), changes)


def imported_tip(ws: Workspace, checkout: Checkout) -> str:
    """Branch NAME's commit in the toplevel's store: its ref read as data where it is a plain sha
    (that store is the host's, and the import put a commit there), else git is asked."""
    sha = read_ref(checkout.store, f"refs/heads/{ws.name}")
    if sha is not None and SHA_RE.match(sha):
        return sha
    return rev(ws.main_checkout_dir(checkout), f"refs/heads/{ws.name}")


def tips_problems(ws: Workspace, expected: dict[str, str], tips: dict[str, str]) -> list[str]:
    """Where the tips to land differ from the ones the reviewed dry run showed."""
    problems = []
    for checkout in ws.checkouts():
        want, got = expected.get(checkout.name), tips.get(checkout.name)
        if want != got:
            problems.append(f"{ws.display(checkout.path)}: the dry run you reviewed would land "
                            f"{want or 'nothing'}, but the branch is now at {got or 'nothing to land'} "
                            "(committed since); run the dry run again and review what it shows")
    return problems


@holds_group_lock("git.merge-up")
def merge_up(ws: Workspace, no_ff: bool = False, dry_run: bool = False, expect: str | None = None,
             allow_self_edit: bool = False) -> int:
    """``expect``: the dry run's ``REPO=SHA,...``; refused (nothing moved) unless exactly those land.
    ``allow_self_edit``: the landing may change chtop's own files and policy in the container repo."""
    refuse_in_toplevel(ws, "git.merge-up")
    expected = parse_expect(ws, expect) if expect is not None else None
    verify_git_dirs(ws.for_root(ws.toplevel))
    # the toplevel checkouts' status (where the merges land: no sandbox writes there) is asked while
    # the import runs, and the worktree's while the relations are counted
    landing_dirty = in_background(dirty_paths_of, [ws.main_checkout_dir(c) for c in ws.checkouts()
                                                   if c.path.exists()], True, True)
    with answered_before_leaving(landing_dirty):
        # the worktree's tracked changes alone (merge-up lands commits, and minds no untracked file
        # there), asked once its checkouts are verified, while the import runs
        feature_dirty = StartedLater(dirty_paths_of, existing_checkout_dirs(ws), False)
        with answered_before_leaving(feature_dirty.wait):
            synced_and_verified(ws, strict=True, on_verified=feature_dirty.start)   # lands what the agent committed
            landings = fan_out(lambda checkout: landing_of(ws, checkout), present_checkouts(ws))
        dirty_here = feature_dirty.wait()
    dirty_there = landing_dirty()
    rels = [landing.rel for landing in landings]
    tips = {landing.rel.checkout.name: landing.tip for landing in landings if landing.tip}
    touched_by = {id(landing.rel): landing.touched for landing in landings}
    changes_by = {id(landing.rel): landing.changes for landing in landings}
    raise_if_problems(problems_of(
        rels, lambda rel: merge_up_problems(ws, rel, no_ff, tips.get(rel.checkout.name),
                                            dirty_here.get(rel.checkout.path), allow_self_edit,
                                            changes_by[id(rel)] if rel.ahead else None),
        lambda rel: toplevel_checkout_problems(ws, rel, tips.get(rel.checkout.name), touched_by[id(rel)],
                                               dirty_there.get(ws.main_checkout_dir(rel.checkout)))), "merge-up")
    if expected is not None:
        raise_if_problems(tips_problems(ws, expected, tips), "merge-up")
    steps = plan_merge_up(ws, rels, no_ff, tips)
    carry_out(ws, rels, steps, "merge-up", dry_run, lambda step: CommandFailed(
        f"merge into {ws.display(step.cwd)} failed (see git's message above); "
        "repos already merged stay merged. Run `inv git.rebase-down` in the worktree and retry."),
        landed_on_integration, relation=lambda ws, checkout: relation_in_toplevel(ws, checkout, tips),
        at_once=not no_ff)
    if dry_run and tips:
        say(f"to land exactly these tips: inv git.merge-up --expect {format_expect(ws, tips)}")
    elif not dry_run:
        for step in steps:
            say(f"landed {ws.display(step.checkout.path)} at {tips[step.checkout.name]}")
        say(landed_line(ws, rels))
    return 0


def landed_line(ws: Workspace, rels: list[Relation]) -> str:
    """``landed dev: ksgpu 1, pirate 2 commits`` (what merge-up moved), or that nothing was due."""
    parts = [f"{rel.checkout.name or ws.toplevel.name} {rel.ahead}" for rel in rels if rel.ahead]
    if not parts:
        return f"landed nothing: every integration branch already has {ws.name}"
    total = sum(rel.ahead for rel in rels)
    return f"landed {ws.name}: {', '.join(parts)} commit{'s' if total != 1 else ''}"
