"""Git across every repo of a workspace: status, diff, relations, rebase, merge.

Read-only fan-out (status, diff, ahead/behind) runs in a bounded thread
pool and prints in manifest order; changes (rebase, merge) check every
repo first, then run one repo at a time.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core import runner
from ..core.errors import ChtopError, CommandFailed, Refused, UsageError
from ..core.fanout import StartedLater, answered_before_leaving, fan_out, in_background
from ..core.gitprobe import (
    REVIEW_DIFF_OPTS,
    REVIEW_ENV,
    REVIEW_GIT_OPTS,
    WORKTREE_DIFF_DRIVERS_OFF,
    WORKTREE_SUBMODULES,
    ahead_behind,
    ambiguous_short_name,
    dirty_paths,
    git_dir_as_data,
    head_branch,
    operation_in_progress,
    rev,
    untracked_in_the_way,
)
from ..core.gitrun import HOST_GIT_OPTS, git
from ..core.term import bold, git_color_args, inert_keeping_colour, say, warn
from ..stores.quarantine import SHA_RE, read_ref, store_of, sync_worktree
from ..workspace.grouplock import holds_group_lock
from ..workspace.layout import Checkout, Workspace, verify_git_dirs
from .landing import (
    Change,
    attribute_problems,
    changes_since_fork,
    git_quoted,
    hidden_pinned_warnings,
    pinned_path_problems,
    review_marks,
)


def present_checkouts(ws: Workspace) -> list[Checkout]:
    """The checkouts that exist; absent ones are warned about."""
    result = []
    for checkout in ws.checkouts():
        if checkout.path.exists():
            result.append(checkout)
        else:
            warn(f"{ws.display(checkout.path)} is missing (run `inv toplevel.init` in the toplevel)")
    return result


# -- status / diff -----------------------------------------------------------


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


# -- branch relations -----------------------------------------------------------


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


# -- rebase-down / merge-up -------------------------------------------------------


def refuse_in_toplevel(ws: Workspace, what: str) -> None:
    if ws.is_toplevel:
        raise Refused(
            f"{what} runs in a feature worktree, not the toplevel {ws.toplevel}.\n"
            f"cd {ws.grouping}/<feature> and run it there."
        )


def preflight_problems(ws: Workspace, rel: Relation, dirty: list[str] | None = None) -> list[str]:
    """``dirty``: ``dirty_paths`` of the checkout, when the caller has it already."""
    here = ws.display(rel.checkout.path)
    problems = []
    if rel.off_branch:
        problems.append(f"{here}: on {rel.branch or 'a detached HEAD'}, expected branch {rel.expected_branch!r}")
    busy = operation_in_progress(rel.checkout.path)
    if busy:
        problems.append(f"{here}: a {busy} is in progress; finish it (git {busy} --continue) or abort it first")
    dirty = dirty_paths(rel.checkout.path) if dirty is None else dirty
    tracked = [d[3:] for d in dirty if not d.startswith("??")]
    if tracked:
        problems.append(f"{here}: uncommitted changes to tracked files ({len(tracked)} paths: "
                        f"{', '.join(tracked[:4])}); commit or stash them")
    return problems


def rebase_problems(ws: Workspace, rel: Relation, dirty: list[str] | None = None) -> list[str]:
    """``dirty``: the checkout's ``dirty_paths``, when the caller has it already (one git status for
    both checks)."""
    dirty = dirty_paths(rel.checkout.path) if dirty is None else dirty
    problems = preflight_problems(ws, rel, dirty)
    if rel.behind:
        in_the_way = untracked_in_the_way(rel.checkout.path, rel.integration, dirty)
        if in_the_way:
            problems.append(f"{ws.display(rel.checkout.path)}: untracked files that {rel.integration} "
                            f"also has would be overwritten ({', '.join(in_the_way[:4])}); move them away")
    return problems


def dirty_paths_of(checkout_dirs: list[Path], untracked: bool = True,
                   toplevel: bool = False) -> dict[Path, list[str]]:
    """``dirty_paths`` of each checkout dir, at once; one git could not answer for is left out (its
    check asks again, and says why)."""
    def one(checkout_dir: Path) -> list[str] | None:
        try:
            return dirty_paths(checkout_dir, untracked, toplevel)
        except (ChtopError, OSError):
            return None
    found = fan_out(one, checkout_dirs)
    return {path: dirty for path, dirty in zip(checkout_dirs, found, strict=True) if dirty is not None}


def existing_checkout_dirs(ws: Workspace) -> list[Path]:
    """The dirs of the checkouts that exist (``present_checkouts``, which also warns about the rest)."""
    return [c.path for c in ws.checkouts() if c.path.exists()]


def problems_of(rels: list[Relation], *checks) -> list[str]:
    """Each check's problems for every repo (read-only git, fanned out), in check order, then repo order."""
    found = fan_out(lambda rel: [check(rel) for check in checks], rels)
    return [problem for index in range(len(checks)) for per_repo in found for problem in per_repo[index]]


def per_relation(compute):
    """``compute(rel)``, asked once per relation however often it is wanted (each relation's checks run
    in one thread of ``problems_of``)."""
    answers: dict[int, object] = {}

    def answer(rel: Relation):
        if id(rel) not in answers:
            answers[id(rel)] = compute(rel)
        return answers[id(rel)]
    return answer


def raise_if_problems(problems: list[str], what: str) -> None:
    if problems:
        raise Refused(f"{what}: nothing was changed, because:\n  " + "\n  ".join(problems))


@dataclass
class GitStep:
    """One planned git command, and why."""

    checkout: Checkout
    cwd: Path
    argv: list[str]
    note: str


def plan_rebase_down(ws: Workspace, rels: list[Relation], rebase_args: list[str]) -> list[GitStep]:
    steps = []
    for rel in rels:
        if rel.behind == 0:
            continue
        steps.append(GitStep(rel.checkout, rel.checkout.path,
                          ["git", *HOST_GIT_OPTS, "rebase", *rebase_args, rel.integration],
                          f"{rel.behind} new commit(s) on {rel.integration}"))
    return steps


def print_plan(ws: Workspace, rels: list[Relation], steps: list[GitStep], verb: str, dry_run: bool) -> None:
    """One line per repo; the command itself only for a dry run (a real run echoes it as it runs)."""
    planned = {id(s.checkout): s for s in steps}
    for rel in rels:
        step = planned.get(id(rel.checkout))
        name = ws.display(rel.checkout.path)
        if step is None:
            say(f"  {name}: nothing to {verb}")
        elif dry_run:
            say(f"  {name}: {step.note}\n    would run: {runner.format_command(step.argv, step.cwd)}")
        else:
            say(f"  {name}: {step.note}")


def plan_heading(what: str, ws: Workspace, dry_run: bool) -> str:
    return f"{what} {ws.root}" + (" (dry run: nothing will be changed):" if dry_run else ":")


def dry_run_footer(steps: list[GitStep]) -> str:
    return f"dry run: {len(steps)} command(s) not run, nothing was changed (run again without --dry-run)"


def maybe_behind(ws: Workspace) -> bool:
    """Whether some checkout's branch NAME is not at the toplevel's tip of its integration branch (read
    as data; the relations say whether it is behind)."""
    for checkout in ws.checkouts():
        store = store_of(ws, checkout)
        tip = read_ref(checkout.store, f"refs/heads/{ws.integration_branch(checkout)}")
        if store.is_dir() and read_ref(store, f"refs/heads/{ws.name}") != tip:
            return True
    return False


def refuse_while_sandboxed(ws: Workspace, running: list[str], what: str) -> None:
    """A host git that writes a worktree's git dirs runs only while no sandbox of it runs: inside,
    the agent could plant a link there between chtop's check and git's write."""
    if running:
        raise Refused(f"{what}: nothing was changed, because {len(running)} sandbox(es) run in {ws.root} "
                      f"({', '.join(running)}): git would write into git dirs the agent can change while it "
                      f"runs. End the agent or shell there (or: podman stop {' '.join(running)}) and retry")


@holds_group_lock("git.rebase-down")
def rebase_down(ws: Workspace, rebase_args: list[str], dry_run: bool = False,
                running_sandboxes=lambda ws: []) -> int:
    """``running_sandboxes(ws)``: the names of the sandboxes running in ``ws`` (the task asks podman)."""
    refuse_in_toplevel(ws, "git.rebase-down")
    # the busy check (podman ps, a process of its own) runs while the repos are checked, and is answered before any
    # rebase: started at once unless every branch is at its integration tip (nothing to rebase), else
    # once the relations say something is behind
    busy = in_background(running_sandboxes, ws) if not dry_run and maybe_behind(ws) else None
    # however the checks end, the busy check is answered before this returns: no podman left behind
    with answered_before_leaving(lambda: busy() if busy is not None else None):
        # the checkouts' status is asked once they are verified, while the import and the relations run
        status = StartedLater(dirty_paths_of, existing_checkout_dirs(ws))
        with answered_before_leaving(status.wait):
            # imports first; the integration branches inside are the host's latest
            synced_and_verified(ws, strict=True, on_verified=status.start)
            rels = relations(ws)
            if busy is None and any(rel.behind for rel in rels) and not dry_run:
                busy = in_background(running_sandboxes, ws)
        dirty = status.wait()
        raise_if_problems(problems_of(rels, lambda rel: rebase_problems(ws, rel, dirty.get(rel.checkout.path))),
                          "rebase-down")
        steps = plan_rebase_down(ws, rels, rebase_args)
    running = busy() if busy is not None else []
    if steps and not dry_run:
        refuse_while_sandboxed(ws, running, "rebase-down")
    try:
        carry_out(ws, rels, steps, "rebase-down", dry_run, lambda step: rebase_stopped(ws, step),
                  rebased_onto_integration, relation=relation_after_rebase, writes_worktree=True,
                  at_once=not rebase_args and all(rel.ahead == 0 for rel in rels if rel.behind))
    finally:
        if steps and not dry_run:      # imported at once, as chtop's own rewrite (not the agent's)
            sync_worktree(ws, rewritten_by_host=True)
    return 0


LOOP_WORDS = {"rebase-down": ("rebase-down in", "rebase"), "merge-up": ("merge-up from", "land")}


def carry_out(ws: Workspace, rels: list[Relation], steps: list[GitStep], what: str, dry_run: bool, failure,
              outcome, relation=None, writes_worktree: bool = False, at_once: bool = False) -> None:
    """Show the plan; unless a dry run, run it (one repo at a time, or ``at_once``: see ``run_steps``)
    and check the outcome."""
    heading, verb = LOOP_WORDS[what]
    say(plan_heading(heading, ws, dry_run))
    print_plan(ws, rels, steps, verb, dry_run)
    if dry_run:
        say(dry_run_footer(steps))
        return
    run_steps(steps, failure, ws if writes_worktree else None, at_once, display=ws.display)
    check_outcome(ws, steps, outcome, what, relation=relation or relation_of)


def rebased_onto_integration(ws: Workspace, rel: Relation) -> str | None:
    """After a rebase: the feature branch holds every commit of its integration branch."""
    if rel.off_branch:
        return f"is on {rel.branch or 'a detached HEAD'}, expected {rel.expected_branch!r}"
    if rel.behind:
        return f"is still {rel.behind} commit(s) behind {rel.integration}"
    return None


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


def relation_after_rebase(ws: Workspace, checkout: Checkout) -> Relation:
    """``relation_of`` a feature checkout after a rebase-down, which with no commits of its own
    leaves its branch at its integration tip: read as data then (``at_integration_tip``)."""
    return relation_of(ws, checkout)


def check_outcome(ws: Workspace, steps: list[GitStep], outcome, what: str, relation=relation_of) -> None:
    """Re-read the relations of the repos acted on; fail if one is not what the plan meant."""
    acted = [step.checkout for step in steps]
    found = fan_out(lambda checkout: outcome(ws, relation(ws, checkout)), acted)      # read-only git
    wrong = [f"{ws.display(checkout.path)} {problem}" for checkout, problem in zip(acted, found, strict=True) if problem]
    if wrong:
        raise CommandFailed(f"{what} ran, but the result is not what was planned:\n  " + "\n  ".join(wrong))


EDITOR_FLAGS = ("-i", "--interactive", "--edit-todo")     # git then needs your terminal for an editor


def run_steps(steps: list[GitStep], failure, ws: Workspace | None = None, at_once: bool = False,
              display=str) -> None:
    """Run the planned commands one repo at a time, each under a line naming its repo (``display``:
    how its checkout dir is named); stop at the first failure.  Their output names
    the agent's files and commits ("Merge conflict in PATH"): shown inert, unless an editor runs.

    With ``ws`` (a feature worktree whose git dirs the step writes), each repo's git dirs are
    checked again just before its step: no link, FIFO or device anywhere in its private store
    and admin dir, so the writing git follows nothing the agent planted.

    ``at_once``: the steps are fast-forwards, which cannot conflict and need no terminal (each repo
    is its own): they run at the same time, echoed first and their output shown after, inert, in
    plan order, each repo's under a line naming it (``display``: how its checkout dir is named);
    the first failure in plan order is raised once all have ended."""
    if at_once and len(steps) > 1:
        run_steps_at_once(steps, failure, ws, display)
        return
    for step in steps:
        if ws is not None:
            verify_git_dirs(ws, [step.checkout.name])
        inert = not any(arg in EDITOR_FLAGS for arg in step.argv)
        say(bold(f"==== {display(step.cwd)}"))
        if not runner.run(step.argv, cwd=step.cwd, check=False, capture=False, shown_inert=inert).ok:
            raise failure(step)


def run_steps_at_once(steps: list[GitStep], failure, ws: Workspace | None, display=str) -> None:
    for step in steps:
        runner.echo(step.argv, step.cwd)

    def one(step: GitStep) -> runner.Result:
        if ws is not None:
            verify_git_dirs(ws, [step.checkout.name])
        return runner.run(step.argv, cwd=step.cwd, check=False, quiet=True)
    results = fan_out(one, steps)
    for step, result in zip(steps, results, strict=True):
        show_step_output(step, result, display)
    for step, result in zip(steps, results, strict=True):
        if not result.ok:
            raise failure(step)


def show_step_output(step: GitStep, result: runner.Result, display=str) -> None:
    """One repo's buffered output (inert) under a line naming the repo, as ``git.status`` heads each
    repo's: a header, not a prefix on each line, keeps git's own lines (a diffstat's columns, the
    commands its messages suggest) as git wrote them.  A repo that printed nothing shows nothing."""
    if not (result.stdout or result.stderr):
        return
    sys.stdout.write(bold(f"==== {display(step.cwd)}") + "\n")
    sys.stdout.write(inert_keeping_colour(result.stdout, sys.stdout))
    sys.stdout.flush()
    sys.stderr.write(inert_keeping_colour(result.stderr, sys.stderr))
    sys.stderr.flush()


def rebase_stopped(ws: Workspace, step: GitStep) -> ChtopError:
    """A repo's rebase stopped: recorded on the host (so the user's ``git rebase --continue`` is
    imported as this rebase finished: ``rebasemark``), and what to do, as the error."""
    from ..stores import rebasemark

    checkout = step.checkout
    rebasemark.record_stopped(ws.grouping, ws.name, checkout.name, read_ref(checkout.store, f"refs/heads/{ws.name}"),
                              read_ref(checkout.store, f"refs/heads/{ws.integration_branch(checkout)}"))
    return ChtopError(conflict_instructions(ws, step))


def conflict_instructions(ws: Workspace, step: GitStep) -> str:
    return (
        f"rebase stopped in {ws.display(step.cwd)} (see git's message above).\n"
        f"That repo is left mid-rebase; repos already rebased stay rebased. Finish by hand:\n"
        f"  cd {step.cwd}\n"
        f"  # fix the conflicted files, then: git add <files>\n"
        f"  git rebase --continue     # repeat until done\n"
        f"  git rebase --abort        # or bail out: back to where it started\n"
        f"Do not re-run rebase-down to resume; git refuses a new rebase mid-rebase."
    )


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


# -- what was reviewed is what lands ----------------------------------------------------------------

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
