"""The changes of rebase-down and merge-up as plans: every repo checked first, the plan shown, then
run one repo at a time (or at once, where they cannot conflict) and the outcome checked."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ..core import runner
from ..core.errors import ChtopError, CommandFailed, Refused
from ..core.fanout import fan_out
from ..core.gitprobe import dirty_paths, operation_in_progress
from ..core.term import bold, inert_keeping_colour, say
from ..workspace.layout import Checkout, Workspace, verify_git_dirs
from .status import Relation, relation_of


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
