"""The loop with the remotes the repos live on: ``git.pull`` and ``git.push``.

Both act on the toplevel's checkouts, where the integration branches live (run from a worktree,
they act on its toplevel).  ``pull`` fetches every repo (the container repo too), then
fast-forwards each integration branch that is checked out clean there, and says what moved and
what could not (diverged, dirty, on another branch, remote unreachable) without touching it.
The container repo's policy files (``sandbox/``: ``inv net.allow`` writes there, and you edit them)
may be uncommitted: git's own fast-forward carries them along when the remote did not change
them, and refuses, changing nothing, when it did; then the pull says how to merge by hand.
``push`` pushes each integration branch that is ahead of its remote, never forced; a feature
branch only when named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import CommandFailed
from ..core.fanout import fan_out
from ..core.gitprobe import ahead_behind, branch_exists, dirty_paths, head_branch, operation_in_progress, rev
from ..core.gitrun import git
from ..core.term import say, warn
from ..workspace.grouplock import holds_group_lock
from ..workspace.layout import Checkout, Workspace, verify_git_dirs
from .status import relation_words

FETCH_TIMEOUT = 120
POLICY_DIR = "sandbox"   # the container repo's policy files, which chtop's net.allow and the user edit in place


@dataclass(frozen=True)
class Upstream:
    """Where an integration branch lives on its remote."""

    remote: str
    branch: str

    @property
    def tracking(self) -> str:
        return f"refs/remotes/{self.remote}/{self.branch}"

    @property
    def label(self) -> str:
        return f"{self.remote}/{self.branch}"


def config_value(repo_dir: Path, key: str) -> str | None:
    got = git(repo_dir, ["config", "--get", key], check=False, toplevel_only=True)
    return got.stdout.strip() or None if got.ok else None


def config_values(repo_dir: Path) -> dict[str, str]:
    """Every key of the repo's git config (all the files ``git config --get`` reads) -> its last
    value, as ``--get`` answers it, from one git: keys as git prints them, section and variable
    names lowercased, a branch's name as it is."""
    got = git(repo_dir, ["config", "-z", "--list"], check=False, toplevel_only=True)
    values = {}
    for entry in got.stdout.split("\0") if got.ok else []:
        key, _, value = entry.partition("\n")
        if key:
            values[key] = value.strip()
    return values


def upstream_of(repo_dir: Path, branch: str) -> Upstream | None:
    """The branch's configured upstream (``branch.B.remote``/``.merge``), else ``origin/B`` when the
    repo has a remote ``origin``; None without either."""
    config = config_values(repo_dir)
    remote, merge = config.get(f"branch.{branch}.remote"), config.get(f"branch.{branch}.merge")
    if remote and remote != "." and merge and merge.startswith("refs/heads/"):
        return Upstream(remote, merge[len("refs/heads/"):])
    if config.get("remote.origin.url"):
        return Upstream("origin", branch)
    return None


def plural(n: int) -> str:
    return f"{n} commit{'s' if n != 1 else ''}"


def toplevel_repos(ws: Workspace) -> tuple[Workspace, list[Checkout]]:
    top = ws.for_root(ws.toplevel)
    verify_git_dirs(top)
    present = []
    for checkout in top.checkouts():
        if (checkout.path / ".git").exists():
            present.append(checkout)
        else:
            warn(f"{top.display(checkout.path)} is not cloned (run `inv toplevel.init` in {top.toplevel})")
    return top, present


def unpulled(ws: Workspace) -> list[str]:
    """A line per integration branch whose remote-tracking ref (as last fetched: nothing is fetched
    here) has commits the toplevel's branch lacks: ``inv git.pull`` would bring them in.  Where the
    refs alone do not answer, the repos are asked at once (read-only git, fanned out)."""
    from ..stores.quarantine import read_ref

    top = ws.for_root(ws.toplevel)
    asked = []
    for checkout in top.checkouts():
        branch = top.integration_branch(checkout)
        tip, tracked = read_ref(checkout.store, f"refs/heads/{branch}"), \
            read_ref(checkout.store, f"refs/remotes/origin/{branch}")
        if tip is None or tip == tracked or not (checkout.path / ".git").exists():
            continue                    # the common case answered from the refs alone
        asked.append((checkout, tracked))
    return [line for line in fan_out(lambda pair: unpulled_line(top, *pair), asked) if line]


TRACK_FORMAT = "%(upstream)%00%(upstream:remotename)%00%(upstream:remoteref)%00%(upstream:track,nobracket)"


def configured_track(repo_dir: Path, branch: str) -> tuple[Upstream, int] | None:
    """The branch's configured upstream and how many commits it has that the branch lacks, told by one
    ``for-each-ref`` (git reads the config and counts); (upstream, 0) when that ref is gone.  None where
    git's answer is not the plain ``refs/remotes/REMOTE/BRANCH`` case: the caller asks the long way."""
    got = git(repo_dir, ["for-each-ref", f"--format={TRACK_FORMAT}", f"refs/heads/{branch}"], check=False,
              toplevel_only=True)
    fields = got.stdout.rstrip("\n").split("\0") if got.ok and got.stdout.count("\n") == 1 else []
    if len(fields) != 4:
        return None
    tracking, remote, merge, track = fields
    if not (remote and remote != "." and merge.startswith("refs/heads/")):
        return None
    up = Upstream(remote, merge[len("refs/heads/"):])
    if tracking != up.tracking:
        return None
    behind = re.search(r"\bbehind (\d+)", track)
    return up, int(behind.group(1)) if behind else 0


def unpulled_line(top: Workspace, checkout: Checkout, tracked: str | None) -> str | None:
    """``unpulled``'s line for one repo whose branch differs from ``origin/BRANCH`` (``tracked``: that
    ref as read from its store), else None."""
    from ..stores.quarantine import SHA_RE

    branch = top.integration_branch(checkout)
    told = configured_track(checkout.path, branch)
    if told is not None:
        up, behind = told
    else:
        up = upstream_of(checkout.path, branch)
        if up is None:
            return None
        known = (up.tracking == f"refs/remotes/origin/{branch}" and tracked is not None and SHA_RE.match(tracked)) \
            or git(checkout.path, ["rev-parse", "--verify", "--quiet", up.tracking], check=False,
                   toplevel_only=True).ok
        behind = ahead_behind(checkout.path, up.tracking, branch)[1] if known else 0
    if not behind:
        return None
    return f"{top.display(checkout.path)}: {up.label} has {plural(behind)} that {branch} here lacks (as last fetched)"


# -- pull ---------------------------------------------------------------------------------------------


@dataclass
class PullResult:
    checkout: Checkout
    line: str
    outcome: str           # moved, current, stuck, unreachable


def fetch(top: Workspace, checkout: Checkout, up: Upstream) -> str | None:
    """Fetch ``up.remote`` in the checkout; None, or why it failed."""
    try:
        got = git(checkout.path, ["fetch", "--quiet", "--no-recurse-submodules", up.remote], check=False,
                  toplevel_only=True, timeout=FETCH_TIMEOUT)
    except CommandFailed as exc:        # timed out: an unreachable remote, like a refused one
        return f"could not fetch {up.remote}: {exc}"
    if got.ok:
        return None
    url = config_value(checkout.path, f"remote.{up.remote}.url") or "?"
    return f"could not fetch {up.remote} ({url}): {got.error_tail(2)}"


def fetch_repo(top: Workspace, checkout: Checkout) -> tuple[Upstream | None, str | None]:
    """The integration branch's upstream and, when fetching its remote failed, why."""
    up = upstream_of(checkout.path, top.integration_branch(checkout))
    return up, (fetch(top, checkout, up) if up is not None else None)


def move_repo(top: Workspace, checkout: Checkout, up: Upstream | None, failed: str | None) -> PullResult:
    """After the fetch: fast-forward the integration branch when it is behind, checked out, clean."""
    here, branch = top.display(checkout.path), top.integration_branch(checkout)
    if up is None:
        return PullResult(checkout, f"{here}: {branch} has no remote to pull from; left as it is", "stuck")
    if failed:
        return PullResult(checkout, f"{here}: {failed}; nothing changed in it", "unreachable")
    if not git(checkout.path, ["rev-parse", "--verify", "--quiet", up.tracking], check=False,
               toplevel_only=True).ok:
        return PullResult(checkout, f"{here}: {up.label} does not exist on the remote; {branch} left as it is",
                          "stuck")
    ahead, behind = ahead_behind(checkout.path, up.tracking, branch)
    if not behind:
        extra = f" ({plural(ahead)} to push: inv git.push)" if ahead else ""
        return PullResult(checkout, f"{here}: {branch} up to date with {up.label}{extra}", "current")
    if ahead:
        return PullResult(checkout, f"{here}: {branch} has diverged from {up.label} ({relation_words(ahead, behind)}); "
                                    f"not moved: rebase or merge it there by hand", "stuck")
    carried = () if checkout.name else (POLICY_DIR,)
    why = not_movable(checkout.path, branch, carried)
    if why:
        return PullResult(checkout, f"{here}: {branch} not moved ({plural(behind)} behind {up.label}): {why}", "stuck")
    policy = uncommitted_under(checkout.path, carried)
    old = rev(checkout.path, branch)
    if policy and changed_between(checkout.path, branch, up.tracking, policy):
        return PullResult(checkout, policy_clash(top, checkout, branch, up, policy), "stuck")
    got = git(checkout.path, ["merge", "--ff-only", "--quiet", up.tracking], check=False, quiet=False,
              toplevel_only=True)
    if not got.ok:
        return PullResult(checkout, f"{here}: fast-forward of {branch} failed: {got.error_tail(2)}", "stuck")
    new = rev(checkout.path, branch)
    kept = f"; kept your uncommitted changes to {', '.join(policy)}" if policy else ""
    return PullResult(checkout, f"{here}: {branch} fast-forwarded {plural(behind)} from {up.label} "
                                f"({old[:10]}..{new[:10]}){kept}", "moved")


def uncommitted_under(checkout_dir: Path, dirs: tuple[str, ...]) -> list[str]:
    """The tracked files under ``dirs`` with uncommitted changes."""
    if not dirs:
        return []
    tracked = [d[3:] for d in dirty_paths(checkout_dir, untracked=False, toplevel=True)]
    return [path for path in tracked if path.startswith(tuple(f"{d}/" for d in dirs))]


def changed_between(checkout_dir: Path, old: str, new: str, paths: list[str]) -> list[str]:
    """Which of ``paths`` differ between ``old`` and ``new``."""
    got = git(checkout_dir, ["diff", "--name-only", old, new, "--", *paths], toplevel_only=True)
    return [line for line in got.stdout.splitlines() if line]


def policy_clash(top: Workspace, checkout: Checkout, branch: str, up: Upstream, policy: list[str]) -> str:
    """The line for a remote that changed a policy file you changed too (not committed)."""
    where = checkout.path
    both = changed_between(where, branch, up.tracking, policy)
    return (f"{top.display(where)}: {branch} not moved: {up.label} changes {', '.join(both)} too, which has your "
            f"uncommitted policy changes; commit yours, then merge theirs by hand: "
            f"git -C {where} commit -m 'sandbox policy' -- {POLICY_DIR} && git -C {where} merge {up.label}")


def not_movable(checkout_dir: Path, branch: str, carried: tuple[str, ...] = ()) -> str | None:
    """Why the integration branch checked out in the toplevel cannot be fast-forwarded, or None;
    uncommitted changes under the dirs ``carried`` do not count (``uncommitted_under``)."""
    on = head_branch(checkout_dir)
    if on != branch:
        return f"the checkout is on {repr(on) if on else 'a detached HEAD'}, expected {branch!r}"
    busy = operation_in_progress(checkout_dir)
    if busy:
        return f"a {busy} is in progress there"
    tracked = [d[3:] for d in dirty_paths(checkout_dir) if not d.startswith("??")]
    tracked = [path for path in tracked if not path.startswith(tuple(f"{d}/" for d in carried))]
    if tracked:
        return f"uncommitted changes to {', '.join(tracked[:4])}; commit or stash them, then pull again"
    return None


@holds_group_lock("git.pull")
def pull(ws: Workspace) -> int:
    """``git.pull``: 0 when every repo was fetched and is current or moved; 1 when a remote could
    not be reached; 3 when a branch could not move.  The fetches run at once; the moves one repo at
    a time."""
    top, checkouts = toplevel_repos(ws)
    fetched = fan_out(lambda c: fetch_repo(top, c), checkouts)
    results = [move_repo(top, c, up, failed) for c, (up, failed) in zip(checkouts, fetched, strict=True)]
    counts = {k: sum(r.outcome == k for r in results) for k in ("moved", "current", "stuck", "unreachable")}
    for r in results:
        (say if r.outcome in ("moved", "current") else warn)(r.line)
    say(f"pull: {counts['moved']} moved, {counts['current']} up to date, {counts['stuck']} not moved, "
        f"{counts['unreachable']} unreachable")
    return 1 if counts["unreachable"] else 3 if counts["stuck"] else 0


# -- push ---------------------------------------------------------------------------------------------


def container_left_alone(top: Workspace, checkout: Checkout) -> str:
    """The line ``git.push`` says for the container repo it does not push by default."""
    branch = top.integration_branch(checkout)
    up = upstream_of(checkout.path, branch)
    where = f" to {up.label}" if up else ""
    return (f"{top.display(checkout.path)}: {branch} left alone (the toplevel's own checkout: chtop and your "
            f"manifest; its remote is where chtop came from); to push it{where}: inv git.push --toplevel")


def push_one(top: Workspace, checkout: Checkout, branch: str, dry_run: bool, feature: bool = False) -> tuple[str, bool]:
    """(summary line, ok) for pushing ``branch`` of one repo."""
    here = top.display(checkout.path)
    up = upstream_of(checkout.path, top.integration_branch(checkout) if not feature else branch)
    if up is None:
        return f"{here}: {branch} has no remote to push to; not pushed", False
    if feature:
        up = Upstream(up.remote, branch)
    known = git(checkout.path, ["rev-parse", "--verify", "--quiet", up.tracking], check=False, toplevel_only=True).ok
    ahead, behind = ahead_behind(checkout.path, up.tracking, branch) if known else (-1, 0)
    if ahead == 0:
        return f"{here}: {branch} nothing to push ({up.label} has it)", True
    if behind:
        return (f"{here}: {branch} is {relation_words(ahead, behind)} {up.label}: not pushed "
                f"(never forced); run `inv git.pull` first"), False
    argv = ["push", "--quiet", up.remote, f"refs/heads/{branch}:refs/heads/{up.branch}"]
    what = f"{plural(ahead)}" if ahead > 0 else "a new branch"
    if dry_run:
        return f"{here}: would push {branch} ({what}) to {up.label}: git -C {checkout.path} {' '.join(argv)}", True
    got = git(checkout.path, argv, check=False, quiet=False, toplevel_only=True, timeout=FETCH_TIMEOUT)
    if not got.ok:
        return f"{here}: push of {branch} to {up.label} failed (not forced): {got.error_tail(2)}", False
    return f"{here}: pushed {branch} ({what}) to {up.label}", True


def push(ws: Workspace, dry_run: bool = False, feature: str = "", toplevel: bool = False) -> int:
    """``git.push``: one line per repo; 0 when nothing failed, else 1.  The container repo (chtop's
    own checkout, where your manifest commit lives) is pushed only with ``toplevel``: its remote is
    where chtop was cloned from, which is rarely where you mean to publish your manifest."""
    top, checkouts = toplevel_repos(ws)
    ok = True
    for checkout in checkouts:
        if not checkout.name and not toplevel:
            say(container_left_alone(top, checkout))
            continue
        line, good = push_one(top, checkout, top.integration_branch(checkout), dry_run)
        (say if good else warn)(line)
        ok &= good
        if feature and branch_exists(checkout.path, feature):
            line, good = push_one(top, checkout, feature, dry_run, feature=True)
            (say if good else warn)(line)
            ok &= good
    if dry_run:
        say("dry run: nothing was pushed (run again without --dry-run)")
    return 0 if ok else 1
