"""Feature worktrees: create, delete and list ``<grouping>/<name>``.

Create checks everything first, then adds one worktree per repo; if a step
fails it removes what this run made, so the same command can run again.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..core import agentfile
from ..core.errors import ChtopError, CommandFailed, Interrupted, Refused, UsageError, WorkspaceError
from ..core.fanout import answered_before_leaving, fan_out, in_background
from ..core.gitprobe import (
    LISTING_TIMEOUT,
    ahead_behind,
    ambiguous_short_name,
    branch_exists,
    dirty_paths,
    head_branch,
    local_branches,
    operation_state,
    rev,
)
from ..core.gitrun import git
from ..core.places import build_cache_dir, create_journal_path, state_dir, worktree_name_problem
from ..core.term import say, warn
from ..stores.quarantine import (
    KEPT_PREFIX,
    SHA_RE,
    attach_private_worktree,
    check_out_files,
    group_git_dir,
    packed_refs_read,
    private_worktree_names,
    read_ref,
    sync_worktree,
    write_store_files,
)
from ..stores.storewalk import worktree_walk_records
from .dotfiles import refresh_workspace_files
from .grouplock import holds_group_lock
from .keep import keep_worktree_commits, prune_worktree_kept, unsaved_in_worktree, unsaved_problems
from .layout import Checkout, Workspace, checkout_problem, find_workspace, private_store, verify_git_dirs
from .manifest import MANIFEST_NAME
from .venvstamp import is_complete, venv_state


def name_problem(ws: Workspace, name: str, check_path: bool = True) -> str | None:
    """Why ``name`` cannot be a new worktree, or None (``check_path``: its dir must not exist yet)."""
    why = worktree_name_problem(name)
    if why:
        return f"worktree name {name!r} {why}"
    if name in ws.reserved_names():
        return f"worktree name {name!r} is reserved in the grouping dir ({', '.join(ws.reserved_names())})"
    if not plainly_a_branch_name(name) and not git(None, ["check-ref-format", "--branch", name], check=False,
                                                   toplevel_only=True).ok:
        return f"worktree name {name!r} is not a valid git branch name"
    path = ws.worktree_root(name)
    if check_path and (path.exists() or path.is_symlink()):
        return f"{path} already exists"
    return None


PLAIN_BRANCH_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def plainly_a_branch_name(name: str) -> bool:
    """Letters, digits, ``_`` and ``-`` only, not starting with ``-`` and not ``HEAD``: a name every
    rule of ``git check-ref-format --branch`` allows (no dot, slash, ``@``, control or special
    character to break one), so git need not be asked (create asked it twice)."""
    return bool(PLAIN_BRANCH_NAME.match(name)) and name != "HEAD"


@dataclass
class AddStep:
    """One checkout of the plan, on private git state ``store``: its branch starts at
    ``start_sha`` (the integration branch ``start``), or at ``branch_sha`` when the
    branch already exists (kept by an earlier delete)."""

    checkout: Checkout
    main_dir: Path
    start: str
    start_sha: str
    reuse_branch: bool
    store: Path
    branch_sha: str | None = None
    submodules: bool = True         # the manifest's ``submodules`` (false: none are initialised)

    @property
    def tip(self) -> str:
        return self.branch_sha if self.reuse_branch and self.branch_sha else self.start_sha


def refuse_uncommitted_manifest(top: Workspace) -> None:
    """A new worktree checks out the toplevel's committed manifest, so an edit not committed yet
    would give it other repos than the toplevel has: refuse, saying how to commit it."""
    manifest = top.manifest.path.name
    changed = git(top.toplevel, ["status", "--porcelain", "--", manifest]).stdout.strip()
    if changed:
        raise Refused(
            f"{top.toplevel / manifest} has uncommitted changes; a new worktree is a checkout of the "
            f"toplevel's last commit, so it would get the committed manifest, not your edit.\n"
            f"Commit it first:  git -C {top.toplevel} commit -m 'my repos' {manifest}"
        )


def plan_create(ws: Workspace, name: str) -> list[AddStep]:
    """Check every repo, then return the worktree adds to make (touches nothing)."""
    why = name_problem(ws, name)
    if why:
        raise UsageError(why)
    top = ws.for_root(ws.toplevel)
    refuse_uncommitted_manifest(top)
    missing = [c.name for c in top.checkouts()[1:] if not (c.path / ".git").exists()]
    if missing:
        raise Refused(f"repo(s) not cloned in the toplevel: {', '.join(missing)}.\nRun `inv toplevel.init` there first.")
    verify_git_dirs(top)
    # the container's integration branch: what the toplevel has checked out
    integration = {c.name: top.integration_branch(c) for c in top.checkouts()}
    found = fan_out(lambda c: local_branches(c.path), top.checkouts())      # one for-each-ref per repo, at once
    branches = {c.name: got for c, got in zip(top.checkouts(), found, strict=True)}
    return steps_for_create(ws, top, name, integration, branches)


def steps_for_create(ws: Workspace, top: Workspace, name: str, integration: dict[str, str],
                     branches: dict[str, dict[str, str]]) -> list[AddStep]:
    """The checkouts ``worktree.create --name NAME`` makes, from what the probes found: each repo's
    integration branch and its local branches (name -> commit).  Pure: no files, no processes."""
    steps = []
    for checkout in top.checkouts():
        main_dir = checkout.path
        new_path = ws.worktree_root(name) / checkout.name if checkout.name else ws.worktree_root(name)
        start, found = integration[checkout.name], branches[checkout.name]
        if start not in found:
            raise Refused(f"{ws.display(main_dir)} has no branch {start!r} (its integration branch)")
        steps.append(AddStep(Checkout(checkout.name, new_path, checkout.store), main_dir, start,
                             found[start], name in found, private_store(ws.grouping, name, checkout.name),
                             found.get(name), wants_submodules(top, checkout.name)))
    return steps


def rmtree(path: Path, ignore_errors: bool = False) -> None:
    """``shutil.rmtree``, imported here: a create imports this module and removes nothing."""
    import shutil

    shutil.rmtree(path, ignore_errors=ignore_errors)


JOURNAL_LOCK = threading.Lock()     # one journal write at a time (CreateRun.record_*)


@dataclass
class CreateRun:
    """What one create run made, so a failure (or the next run, after a kill) can undo exactly that.

    Each step is written to the journal (``places.create_journal_path``) before it is taken, so a
    run killed at any point leaves a list that covers what it made; every entry is a path that did
    not exist when it was written, or a branch this run made (deleted only while still at the tip
    it was made at).  The journal goes when the run succeeds or its undo is done.
    """

    name: str
    journal: Path | None = None
    paths: list[str] = field(default_factory=list)
    branches: list[tuple[str, str]] = field(default_factory=list)   # (repo dir, tip at creation)

    def record_path(self, path: Path) -> None:
        if path.exists() or path.is_symlink():
            raise CommandFailed(f"{path} appeared while worktree {self.name!r} was being made (not by chtop); "
                                "move it away and run the same command again")
        with JOURNAL_LOCK:          # the repos are added at once (add_worktrees)
            self.paths.append(str(path))
            self.append({"path": str(path)})

    def record_branch(self, repo_dir: Path, tip: str) -> None:
        with JOURNAL_LOCK:
            self.branches.append((str(repo_dir), tip))
            self.append({"branch": [str(repo_dir), tip]})

    def append(self, entry: dict) -> None:
        """One line of the journal (JSON), appended: one write, where rewriting the whole list made a
        file and renamed it for every step (nine per create)."""
        if self.journal is None:
            return
        line = json.dumps({"name": self.name, "pid": os.getpid(), **entry}) + "\n"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.journal, flags, 0o600)
        except FileNotFoundError:   # the first step: its dir too
            self.journal.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.journal, flags, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    @classmethod
    def load(cls, journal: Path) -> CreateRun | None:
        """The run a journal records; None when it is not one chtop wrote.  A last line cut short
        (the run was killed writing it) is left out: its step had not been taken.  An empty journal
        is a run killed before its first step.  (A journal of chtop before appends, one JSON object
        with every path and branch, reads too.)"""
        data = agentfile.read_bytes(journal)
        if data is None:
            return None
        lines = data.decode("utf-8", "replace").splitlines()
        try:
            whole = json.loads(data) if len(lines) == 1 else None
            if isinstance(whole, dict) and "paths" in whole:
                return cls(whole["name"], journal, [str(p) for p in whole["paths"]],
                           [(str(d), str(t)) for d, t in whole["branches"]])
        except (ValueError, KeyError, TypeError):
            return None
        entries = []
        for number, line in enumerate(lines, 1):
            try:
                entries.append(json.loads(line))
            except ValueError:
                if number < len(lines):
                    return None
        try:
            names = {entry["name"] for entry in entries} or {journal.stem}
            if len(names) != 1:
                return None
            paths = [str(entry["path"]) for entry in entries if "path" in entry]
            branches = [(str(entry["branch"][0]), str(entry["branch"][1])) for entry in entries if "branch" in entry]
        except (KeyError, TypeError, IndexError):
            return None
        return cls(names.pop(), journal, paths, branches)

    def undo(self) -> list[str]:
        notes = []
        for path in map(Path, reversed(self.paths)):
            try:
                if path.is_symlink():
                    path.unlink()
                elif path.exists():
                    rmtree(path)
            except OSError as exc:
                notes.append(f"could not remove {path}: {exc}")
        for repo_dir, tip in reversed(self.branches):
            main_dir = Path(repo_dir)
            if branch_exists(main_dir, self.name) and rev(main_dir, self.name) == tip:
                git(main_dir, ["branch", "-D", self.name], check=False, quiet=False, toplevel_only=True)
        if not notes and self.journal is not None:
            self.journal.unlink(missing_ok=True)
        return notes

    def done(self) -> None:
        if self.journal is not None:
            self.journal.unlink(missing_ok=True)


def add_worktrees(steps: list[AddStep], name: str, run: CreateRun) -> None:
    """Each step's branch and checkout.  The container repo's checkout
    is made first (the others are checked out inside it), without its files, while the other repos'
    branches and private stores are made; then its files are written while the others are checked
    out, all at once: each is its own repo and its own private store, and most of the time is git
    writing their files (chtop's own container checkout is 240 files)."""
    gitdir = steps[0].store.parent if steps else None      # .chtop/git/<name>/
    if gitdir is not None and not (gitdir.is_dir() and not gitdir.is_symlink()
                                   and all(e.name == ".lock" for e in gitdir.iterdir())):
        run.record_path(gitdir)       # (an earlier worktree's import lock alone there is reused)

    def prepare(step: AddStep) -> None:
        """The branch and the private store: nothing inside the container's checkout yet."""
        if step.reuse_branch:
            say(f"branch {name!r} already exists in {step.main_dir}: checking it out (kept by an earlier delete)")
        else:
            run.record_branch(step.main_dir, step.start_sha)
            git(step.main_dir, ["branch", name, step.start_sha], quiet=False, toplevel_only=True)
        run.record_path(step.checkout.path)
        write_store_files(step.store, step.checkout.store, step.start, step.start_sha)

    def attach(step: AddStep, checkout: bool = True) -> None:
        attach_private_worktree(step.store, step.checkout.path, name, step.tip, checkout=checkout)
        if checkout:
            filled(step)

    def filled(step: AddStep) -> None:
        if step.submodules:
            init_submodules(step.checkout.path, step.checkout.name)

    def fill_container(step: AddStep) -> None:
        check_out_files(step.checkout.path, step.tip)
        filled(step)

    if not steps:
        return
    container = steps[0]
    # the biggest checkouts first: the last one started is not the one that takes longest
    biggest_first = sorted(steps, key=lambda step: checkout_size(step.main_dir), reverse=True)
    others_prepared = in_background(fan_out, prepare, [step for step in biggest_first if step is not container])
    with answered_before_leaving(others_prepared):
        prepare(container)
        attach(container, checkout=False)
        others_prepared()
    fan_out(lambda step: fill_container(step) if step is container else attach(step), biggest_first)


def checkout_size(main_dir: Path) -> int:
    """How much a checkout of ``main_dir``'s repo writes, roughly: the size of the toplevel
    checkout's index (the host's own file; 0 when there is none)."""
    try:
        return os.stat(main_dir / ".git" / "index").st_size
    except OSError:
        return 0


def wants_submodules(ws: Workspace, repo_name: str) -> bool:
    """The manifest's ``submodules`` for a repo (the container repo: always)."""
    return ws.manifest.get(repo_name).submodules if repo_name else True


def init_submodules(path: Path, repo_name: str = "") -> None:
    """``git submodule update --init --recursive`` in ``path``; a failure names the manifest key
    that skips it."""
    if not (path / ".gitmodules").exists():
        return
    try:
        git(path, ["submodule", "update", "--init", "--recursive"], quiet=False)
    except CommandFailed as exc:
        if not repo_name:
            raise
        raise CommandFailed(
            f"{exc}\nthe submodules of {repo_name} could not be initialised. If the repo builds without "
            f"them, skip them: set `submodules = false` in its [[repo]] entry (name = {repo_name!r}) of "
            f"{MANIFEST_NAME}, commit that in the toplevel, and run the same command again.") from exc


def undo_interrupted_create(ws: Workspace, name: str) -> None:
    """An earlier create of ``name`` was killed (its journal is still there, and the group lock is
    free, so it no longer runs): undo what it made, so this run starts clean."""
    journal = create_journal_path(ws.grouping, name)
    if not journal.exists() and not journal.is_symlink():
        return
    earlier = CreateRun.load(journal)
    if earlier is None or earlier.name != name:
        raise WorkspaceError(f"{journal} is not a journal chtop wrote; look at it, remove it, and run the "
                             "same command again")
    warn(f"an earlier `worktree.create --name {name}` was interrupted; undoing what it made")
    notes = earlier.undo()
    if notes:
        raise CommandFailed("undoing it failed:\n  " + "\n  ".join(notes)
                            + f"\nRemove those by hand, then: rm {journal}")


def create_worktree(ws: Workspace, name: str, build_venv=None) -> Workspace:
    """Make ``<grouping>/<name>`` with a worktree of every repo on branch ``name``.

    ``build_venv(new_ws)`` runs last (outside the group lock); its failure (or Ctrl-C) keeps the
    worktrees, and the same call again resumes: it builds the venv of the kept checkouts.
    """
    why = name_problem(ws, name, check_path=False)   # a bad name makes nothing, not even the lock
    if why:
        raise UsageError(why)
    kept = kept_worktree_to_resume(ws, name, build_venv)
    if kept is not None:
        say(f"worktree {name!r} is there from an earlier worktree.create whose venv step did not finish: "
            f"building its venv ({kept.venv_dir})")
        refresh_workspace_files(kept)
        run_venv_step(build_venv, kept)
        return kept
    new_ws = make_worktree(ws, name)
    if build_venv is not None:
        run_venv_step(build_venv, new_ws)
    return new_ws


@holds_group_lock("worktree.create")
def make_worktree(ws: Workspace, name: str) -> Workspace:
    """The checkouts, branches, private stores and dotfiles of ``create_worktree``, all or nothing."""
    undo_interrupted_create(ws, name)
    steps = plan_create(ws, name)
    run = CreateRun(name, create_journal_path(ws.grouping, name))
    try:
        add_worktrees(steps, name, run)
        new_ws = find_workspace(ws.worktree_root(name))
        refresh_workspace_files(new_ws)
    except (ChtopError, OSError, KeyboardInterrupt) as exc:
        notes = run.undo()
        detail = "\n".join(notes)
        raise CommandFailed(
            f"creating worktree {name!r} failed: {exc}\n"
            f"Undid what this run made{' (with problems: ' + detail + ')' if notes else ''}; "
            f"fix the cause and run the same command again."
        ) from exc
    run.done()
    return new_ws


def kept_worktree_to_resume(ws: Workspace, name: str, build_venv) -> Workspace | None:
    """The worktree ``name`` when an earlier create made all its checkouts but not its venv (it
    failed, was interrupted, or had --no-venv) and this run builds one; else None."""
    root = ws.worktree_root(name)
    if build_venv is None or worktree_name_problem(name) or name in ws.reserved_names():
        return None
    if root.is_symlink() or not (root / ".git").is_file():
        return None
    if create_journal_path(ws.grouping, name).exists():
        return None         # an earlier create was killed making the checkouts: undone, not resumed
    wt = find_workspace(root)
    if wt.root != root or any(not (c.path / ".git").exists() for c in wt.checkouts()):
        return None
    return None if is_complete(wt.venv_dir) else wt


def run_venv_step(build_venv, wt: Workspace) -> None:
    """``build_venv(wt)``; Ctrl-C there keeps the checkouts and says how to resume (exit 130)."""
    try:
        build_venv(wt)
    except (KeyboardInterrupt, Interrupted):
        raise ChtopError(f"interrupted while building the venv of {wt.root}; the checkouts are kept. Resume with "
                         f"the same command: inv worktree.create --name {wt.name}", 130) from None


def closing_hints(ws: Workspace) -> str:
    if is_complete(ws.venv_dir):
        direnv = f"  cd {ws.root} && direnv allow .      # activates its venv"
    else:
        direnv = (f"  cd {ws.root} && direnv allow .      # its env; no venv yet (--no-venv): "
                  f"inv venv.build --workdir {ws.root}")
    return "\n".join([
        f"Worktree ready: {ws.root}",
        "Next:",
        direnv,
        "  inv session.start && inv session.attach   # the sandboxed agent, persistent (detach: C-b d)",
        f"Its agent has a config dir of its own: the group's login ({ws.login_dir}/.credentials.json) is copied",
        "into it at launch; without one, /login there once (or a long-lived token in ~/.config/chtop/secrets.env).",
    ])


# -- delete ------------------------------------------------------------------


def worktree_workspace(ws: Workspace, name: str) -> Workspace:
    root = ws.worktree_root(name)
    if name in ws.reserved_names() or worktree_name_problem(name):
        raise UsageError(f"{name!r} is not a worktree name")
    if not (root / ".git").is_file():
        from .suggest import no_worktree_message

        raise UsageError(no_worktree_message(ws.grouping, name))
    return find_workspace(root)


def integration_for_delete(wt: Workspace, top: Workspace | None, checkout: Checkout) -> str:
    """A checkout's integration branch: the worktree's manifest says, or (a repo only the
    toplevel's manifest names) the toplevel's."""
    known = not checkout.name or checkout.name in wt.manifest.names
    return (wt if known or top is None else top).integration_branch(checkout)


def delete_problems(wt: Workspace, checkouts: list[Checkout] | None = None,
                    top: Workspace | None = None) -> list[str]:
    """What deleting would lose, in every checkout (default: those of the worktree's manifest; a
    repo only the toplevel's manifest names takes its integration branch from ``top``)."""
    def branch_base(checkout: Checkout) -> str:
        return integration_for_delete(wt, top, checkout)

    def check(checkout: Checkout) -> list[str]:
        here = wt.display(checkout.path)
        if not checkout.path.exists():
            return []
        if not checkout.store.is_dir():
            return [f"{here}: its repo is not cloned in the toplevel ({wt.display(checkout.store.parent)}), "
                    "so git cannot check it; its files would be lost"]
        found = []
        dirty = dirty_paths(checkout.path)
        tracked = [d for d in dirty if not d.startswith("??")]
        untracked = [d[3:] for d in dirty if d.startswith("??")]
        if tracked:
            found.append(f"{here}: uncommitted changes to {len(tracked)} tracked path(s): "
                         + ", ".join(d[3:] for d in tracked[:5]))
        if untracked:
            found.append(f"{here}: {len(untracked)} untracked file(s): " + ", ".join(untracked[:5]))
        branch = head_branch(checkout.path)
        if branch:
            tip = toplevel_tip(checkout, branch_base(checkout))
            ahead = 0 if branch_is_at(wt, checkout, branch, tip) else ahead_behind(checkout.path, tip, branch)[0]
            if ahead:
                found.append(f"{here}: {ahead} commit(s) on {branch} not merged up (run `inv git.merge-up` in {wt.root})")
        return found
    return [p for problems in fan_out(check, checkouts or wt.checkouts()) for p in problems]


def branch_is_at(wt: Workspace, checkout: Checkout, branch: str, sha: str) -> bool:
    """Whether ``branch`` in the worktree's private store is the commit ``sha``, read as data (a
    branch merged up and not moved since), where git would read the name ``branch`` as that ref:
    then none of its commits is missing from ``sha``, and no rev-list is asked."""
    tip = read_ref(private_store(wt.grouping, wt.name, checkout.name), f"refs/heads/{branch}")
    return (tip is not None and tip == sha and SHA_RE.match(sha) is not None
            and not ambiguous_short_name(checkout.path, branch))


def toplevel_tip(checkout: Checkout, branch: str) -> str:
    """``branch``'s commit in the toplevel's store (what "merged up" means; the private store's copy
    is refreshed only at the next import), read from its ref file where plain, else its name there."""
    tip = read_ref(checkout.store, f"refs/heads/{branch}")
    return tip if tip and SHA_RE.match(tip) else f"refs/heads/{branch}"


def delete_checks(wt: Workspace, top: Workspace, checkouts: list[Checkout]):
    """What deleting would lose: (problems, unsaved tips per checkout), after the agent's latest
    commits are imported (the git dirs verified first)."""
    verify_git_dirs(wt, [c.name for c in wt.checkouts() if c.store.is_dir()])
    extra_problems = [p for c in checkouts[len(wt.checkouts()):] if (p := checkout_problem(wt, c))]
    if extra_problems:
        raise WorkspaceError("refusing to run git: a checkout's git dir is not the one the workspace layout "
                             "says:\n  " + "\n  ".join(extra_problems))
    sync_worktree(wt, strict=True)     # nothing the agent committed is left behind
    unsaved_found = in_background(unsaved_in_worktree, wt, checkouts)     # both read-only, at once
    with answered_before_leaving(unsaved_found):
        problems = delete_problems(wt, checkouts, top)
    unsaved = unsaved_found()
    return problems + unsaved_problems(wt, unsaved), unsaved


@holds_group_lock("worktree.delete")
def delete_worktree(ws: Workspace, name: str, force: bool = False, cwd: Path | None = None,
                    refuse_if_busy=None) -> list[str]:
    """Remove ``<grouping>/<name>``; returns one line per thing kept: unmerged branches, and the
    ``refs/chtop/kept/NAME/...`` refs that hold what only its private stores had or earlier tips.

    ``refuse_if_busy(wt)`` raises Refused while something still runs in the worktree (its agent
    session, a sandbox): the task passes ``sessions.refuse_while_in_use``.
    """
    if not worktree_name_problem(name):
        undo_interrupted_create(ws, name)     # a create killed half-way: nothing of it is left
    wt = worktree_workspace(ws, name)
    here = (cwd or Path.cwd()).resolve()
    if here == wt.root or wt.root in here.parents:
        raise Refused(f"you are inside {wt.root}; run worktree.delete from elsewhere (e.g. {ws.toplevel})")
    # the busy check (podman ps) runs while the read-only checks go on; it is answered first
    busy_check = in_background(refuse_if_busy, wt) if refuse_if_busy is not None else (lambda: None)
    top = ws.for_root(ws.toplevel)
    checkouts = checkouts_to_delete(wt, top)
    try:
        problems, unsaved = delete_checks(wt, top, checkouts)
    except BaseException:
        busy_check()
        raise
    busy_check()
    if problems and not force:
        raise Refused(f"refusing to delete {wt.root}:\n  " + "\n  ".join(problems)
                      + "\nCommit or merge up, or pass --force to delete the directory anyway "
                        f"(branches with unmerged commits are still kept, and so is every commit only "
                        f"its private stores hold, as {KEPT_PREFIX}/{name}/...).")
    if problems:
        warn("--force: deleting despite:\n  " + "\n  ".join(problems))
    gone, kept = prune_worktree_kept(wt, checkouts, lambda c: integration_for_delete(wt, top, c))
    for line in gone:
        say(line)
    kept += keep_worktree_commits(wt, unsaved)     # before anything is removed
    # only the worktree's own branch: what its HEAD says inside is the agent's to choose
    has_branch = dict(zip(map(id, checkouts), fan_out(lambda c: toplevel_has_branch(top, c, name), checkouts),
                          strict=True))
    def remove_branch(checkout: Checkout) -> str | None:
        """The toplevel's branch NAME of one repo deleted (each repo its own store); what is kept
        instead, or None."""
        main_dir = top.main_checkout_dir(checkout)
        if not (main_dir / ".git").exists():
            warn(f"{ws.display(main_dir)} is not cloned in the toplevel: removing "
                 f"{ws.display(checkout.path)} as a plain directory")
            return None
        if checkout.path.exists() and not private_store(ws.grouping, name, checkout.name).is_dir():
            # not moved onto private git state (a repo only the toplevel's manifest names): still a
            # linked worktree of the shared store, which keeps its branch checked out until removed
            git(main_dir, ["worktree", "remove", "--force", str(checkout.path)], quiet=False)
        if has_branch[id(checkout)]:
            result = git(main_dir, ["branch", "-d", name], check=False, quiet=False, toplevel_only=True)
            if not result.ok:
                return (f"{ws.display(main_dir)}: branch {name} (unmerged commits; "
                        f"`git -C {main_dir} branch -D {name}` drops them)")
        return None
    # the repos inside the worktree at once, then the container repo's (its checkout holds theirs:
    # a `git worktree remove` of it would take theirs away mid-flight)
    removed = fan_out(remove_branch, list(reversed(checkouts[1:]))) + [remove_branch(c) for c in checkouts[:1]]
    kept += [line for line in removed if line]
    remove_trees(wt.root, [c.path for c in checkouts[1:]], group_git_dir(ws.grouping) / name)
    rmtree(worktree_walk_records(state_dir(ws.grouping), name), ignore_errors=True)
    if has_worktree_entries(ws.toplevel):
        git(ws.toplevel, ["worktree", "prune"], check=False, quiet=False, toplevel_only=True)
    remove_policy_layer(ws, name)
    remove_build_cache(ws, name)
    return kept


def remove_trees(root: Path, inner: list[Path], store_dir: Path) -> None:
    """Remove the worktree ``root`` and its private stores ``store_dir``: the repo checkouts inside it
    (``inner``) at once, each its own tree (mostly the kernel's unlinks), then the rest."""
    def remove_dir(path: Path) -> None:
        if path.is_dir() and not path.is_symlink():     # a link in the worktree goes with it, unfollowed
            rmtree(path)
    fan_out(remove_dir, [p for p in inner if root in p.parents])
    for path in (root, store_dir):
        if path.exists():
            rmtree(path)


def has_worktree_entries(toplevel: Path) -> bool:
    """Whether the toplevel's own store lists linked worktrees (``git worktree prune`` has something
    to look at): checkouts made before private stores; a private store's are its own."""
    entries = toplevel / ".git" / "worktrees"
    try:
        return any(True for _ in os.scandir(entries))
    except OSError:
        return False


def toplevel_has_branch(top: Workspace, checkout: Checkout, name: str) -> bool:
    """Whether the toplevel's clone of ``checkout`` has branch ``name``: its ref read as data from the
    toplevel's own store (no sandbox writes it) where it is a plain sha or plainly absent, else git is
    asked."""
    main_dir = top.main_checkout_dir(checkout)
    if not (main_dir / ".git").exists():
        return False
    store = main_dir / ".git"
    if store.is_dir() and not store.is_symlink():
        sha = read_ref(store, f"refs/heads/{name}")
        if sha is not None and SHA_RE.match(sha):
            return True
        if sha is None and not os.path.lexists(store / "refs" / "heads" / name) and packed_refs_read(store):
            return False
    return branch_exists(main_dir, name)


def remove_policy_layer(ws: Workspace, name: str) -> None:
    """The worktree's own net-allow/net-deny layer (``sandbox/worktrees/NAME/``) goes with it."""
    layer = ws.policy_dir / "worktrees" / name
    if layer.is_dir() and not layer.is_symlink():
        rmtree(layer)
        say(f"removed its network policy layer {ws.display(layer)}/ "
            "(if it was committed, commit the removal in the toplevel)")


def remove_build_cache(ws: Workspace, name: str) -> None:
    """What the worktree's builds kept (``<group>/.chtop/build-cache/NAME``: its compiler, uv and pip
    caches, its last build's log; the agent's build could write them) goes with it: a later worktree
    of the same name, another agent's maybe, must not install it."""
    cache = build_cache_dir(ws.grouping, name)
    if cache.is_dir() and not cache.is_symlink():
        rmtree(cache)
        say(f"removed its venv build cache {ws.display(cache)}/")
    elif cache.is_symlink():
        cache.unlink()


def checkouts_to_delete(wt: Workspace, top: Workspace) -> list[Checkout]:
    """The worktree's checkouts (its own manifest), plus any repo of the toplevel's manifest that has
    a checkout in it too (the two manifests differ when one was edited after the worktree was made)."""
    own = wt.checkouts()
    names = {c.name for c in own}
    extra = [Checkout(c.name, wt.root / c.name, c.store) for c in top.checkouts()[1:]
             if c.name not in names and (wt.root / c.name / ".git").is_file()]
    return own + extra


# -- list --------------------------------------------------------------------


def worktree_roots(ws: Workspace) -> list[Path]:
    """Worktrees with private git state, and any made before it (listed by the toplevel's store)."""
    roots = [ws.grouping / name for name in private_worktree_names(ws.grouping)]
    if (ws.toplevel / ".git" / "worktrees").is_dir():
        out = git(ws.toplevel, ["worktree", "list", "--porcelain"]).stdout
        paths = [Path(line[len("worktree "):]) for line in out.splitlines() if line.startswith("worktree ")]
        roots += [p for p in paths if p != ws.toplevel and p.parent == ws.grouping and p not in roots]
    return sorted(roots)


def checkout_record(wt: Workspace, checkout: Checkout) -> dict:
    """One repo of a worktree as data: ``repo``, ``branch`` (None: detached), ``integration``,
    ``ahead``, ``behind``, ``dirty``, ``operation`` (a rebase, merge, ... stopped halfway there, or
    None), ``finish`` (the commands that end it), ``problem`` (None, ``missing``, or why git failed there)."""
    record = {"repo": checkout.label, "branch": None, "integration": wt.integration_branch(checkout),
              "ahead": 0, "behind": 0, "dirty": False, "operation": None, "finish": [], "problem": None}
    if not checkout.path.exists():
        return dict(record, problem="missing")
    try:
        record["branch"] = branch = head_branch(checkout.path)
        record["dirty"] = bool(dirty_paths(checkout.path, timeout=LISTING_TIMEOUT))
        stopped = operation_state(checkout.path)
        if stopped:
            record["operation"], record["finish"] = stopped.name, list(stopped.commands(checkout.path))
            record["branch"] = branch = branch or stopped.branch
        if branch is not None and not stopped:
            record["ahead"], record["behind"] = ahead_behind(checkout.path, record["integration"], branch)
    except ChtopError as exc:        # a junk ref the agent wrote fails that repo's line, never the list
        record["problem"] = "! " + str(exc).splitlines()[0]
    return record


def describe_record(record: dict) -> str:
    """A ``checkout_record`` as ``worktree.list`` prints it (a stopped operation: with the commands
    that end it on the next line)."""
    here, branch, integ = record["repo"], record["branch"], record["integration"]
    if record["problem"]:
        return f"  {here:<16} {record['problem']}"
    state = "dirty" if record["dirty"] else "clean"
    operation = record.get("operation")       # a host running an older chtop has none
    if operation:
        finish = record.get("finish") or []
        labels = ("end it: ",) if len(finish) == 1 else ("go on (git add what you fixed first): ", "or back out: ")
        hint = "   ".join(label + command for label, command in zip(labels, finish, strict=False))
        return f"  {here:<16} {branch or '(detached)':<16} {operation} in progress  {state}\n  {'':<16} {hint}"
    if branch is None:
        return f"  {here:<16} (detached)  {state}"
    return f"  {here:<16} {branch:<16} +{record['ahead']}/-{record['behind']} vs {integ:<10} {state}"


def describe_checkout(wt: Workspace, checkout: Checkout) -> str:
    return describe_record(checkout_record(wt, checkout))




def venv_note(wt: Workspace) -> str:
    """What ``worktree.list`` says about a worktree's venv when it is not complete."""
    state = venv_state(wt.venv_dir)
    if state == "complete":
        return ""
    return (f"  venv {state} (build it: inv venv.build --workdir {wt.root}, "
            f"or the same inv worktree.create --name {wt.name} again)")


def list_worktrees(ws: Workspace) -> list[str]:
    lines = []
    for root in worktree_roots(ws):
        try:
            wt = find_workspace(root)
            sync_worktree(wt)
            verify_git_dirs(wt)
        except (ChtopError, OSError) as exc:
            lines.append(f"{root.name}: {exc}")
            continue
        lines.append(f"{root.name}  ({root}){venv_note(wt)}")
        lines.extend(describe_record(r) for r in fan_out(lambda c, wt=wt: checkout_record(wt, c), wt.checkouts()))
    return lines or [f"no feature worktrees in {ws.grouping} (make one: inv worktree.create --name NAME)"]


def worktree_records(ws: Workspace) -> list[dict]:
    """Every feature worktree as data (``worktree.list --json``): ``name``, ``root``, ``venv``
    (complete, incomplete, missing), ``problem`` (why it could not be read, or None), ``repos``
    (``checkout_record`` each)."""
    records = []
    for root in worktree_roots(ws):
        record = {"name": root.name, "root": str(root), "venv": "missing", "problem": None, "repos": []}
        try:
            wt = find_workspace(root)
            sync_worktree(wt)
            verify_git_dirs(wt)
        except (ChtopError, OSError) as exc:
            records.append(dict(record, problem=str(exc)))
            continue
        record["venv"] = venv_state(wt.venv_dir)
        record["repos"] = fan_out(lambda c, wt=wt: checkout_record(wt, c), wt.checkouts())
        records.append(record)
    return records
