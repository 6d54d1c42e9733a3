"""``git.rebase-down``: each repo's feature branch rebased onto its integration branch."""

from __future__ import annotations

from ..core.errors import ChtopError, Refused
from ..core.fanout import StartedLater, answered_before_leaving, in_background
from ..core.gitprobe import dirty_paths, untracked_in_the_way
from ..core.gitrun import HOST_GIT_OPTS
from ..stores.quarantine import read_ref, store_of, sync_worktree
from ..workspace.grouplock import holds_group_lock
from ..workspace.layout import Checkout, Workspace
from .status import Relation, relation_of, relations, synced_and_verified
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


def plan_rebase_down(ws: Workspace, rels: list[Relation], rebase_args: list[str]) -> list[GitStep]:
    steps = []
    for rel in rels:
        if rel.behind == 0:
            continue
        steps.append(GitStep(rel.checkout, rel.checkout.path,
                          ["git", *HOST_GIT_OPTS, "rebase", *rebase_args, rel.integration],
                          f"{rel.behind} new commit(s) on {rel.integration}"))
    return steps


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


def rebased_onto_integration(ws: Workspace, rel: Relation) -> str | None:
    """After a rebase: the feature branch holds every commit of its integration branch."""
    if rel.off_branch:
        return f"is on {rel.branch or 'a detached HEAD'}, expected {rel.expected_branch!r}"
    if rel.behind:
        return f"is still {rel.behind} commit(s) behind {rel.integration}"
    return None


def relation_after_rebase(ws: Workspace, checkout: Checkout) -> Relation:
    """``relation_of`` a feature checkout after a rebase-down, which with no commits of its own
    leaves its branch at its integration tip: read as data then (``at_integration_tip``)."""
    return relation_of(ws, checkout)


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
