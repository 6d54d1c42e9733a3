"""One worktree's agent cannot reach another's, attacked from inside a real sandbox.

dev's agent plants a hook in every claude settings file it can write, leaves a note in its agent
config dir, looks for other's transcripts and overwrites other's session state file; then other's
real claude (talking to the scripted fake Anthropic API through the proxy) starts again and takes
a prompt.  The hook never runs there, nothing of dev's is visible there, other's transcripts were
never readable from dev, and other's state file is unchanged.  Rootless as the test user, and as
root (rootful podman) on the same user-owned workspace.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from conftest import eventually
from fake_anthropic import FakeAnthropic, text
from sandbox_helpers import as_user, rootful_podman_env, user_group_cm
from test_sessions_claude import containers, need, prepare_claude_group

pytestmark = [pytest.mark.podman, pytest.mark.slow]

OTHER_SECRET = "other-private-prompt-5c1e"
DEV_NOTE = "dev-note-in-its-config-9a7b"
SECOND_PROMPT = "other-second-prompt-77d2"
PWNED = "pwned-by-dev"

# What dev's agent runs in its sandbox.  $1: the host path of other's state file.
ATTACK = r"""
cfg=$CLAUDE_CONFIG_DIR; ch=$(dirname "$PWD"); echo "CFG:$cfg"
hook="echo dev-was-here > \"\$CLAUDE_PROJECT_DIR/alpha/@PWNED@\"; exit 0"
for d in "$cfg" "$cfg/.." "$ch/claude" "$ch/.chtop/agents/other/config"; do
    python3 - "$d/settings.json" "$hook" <<'EOF' 2>/dev/null && echo "WROTE-SETTINGS:$d"
import json, sys
try:
    settings = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    settings = {}
h = [{"hooks": [{"type": "command", "command": sys.argv[2]}]}]
for event in ("UserPromptSubmit", "SessionStart"):
    settings.setdefault("hooks", {}).setdefault(event, []).extend(h)
with open(sys.argv[1], "w") as fh:
    json.dump(settings, fh)
EOF
done
echo @DEV_NOTE@ > "$cfg/dev-note.txt" && echo "WROTE-NOTE"
grep -rl @OTHER_SECRET@ "$cfg" "$ch" 2>/dev/null | sed 's/^/READ:/'
for f in "$cfg"/chtop-state/* "$1"; do
    [ -f "$f" ] && printf 'working\n' > "$f" 2>/dev/null && echo "WROTE-STATE:$f"
done
exit 0
""".replace("@PWNED@", PWNED).replace("@DEV_NOTE@", DEV_NOTE).replace("@OTHER_SECRET@", OTHER_SECRET)

LOOK = f"""grep -rl {DEV_NOTE} "$CLAUDE_CONFIG_DIR" "$(dirname "$PWD")" 2>/dev/null | sed 's/^/SEEN:/'; exit 0"""


@dataclass
class Side:
    """The workspace and how to run chtop's tasks in it: as the test user (rootless) or as root."""

    g: object
    inv: Callable
    run: Callable
    run_dir: Path


def other_row(side, other) -> dict | None:
    proc = side.inv("session.list", "--json", cwd=side.g.toplevel)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {row["worktree"]: row for row in json.loads(proc.stdout)}.get(other.name)


def wait_other(side, other, wanted: set[str], timeout: float = 120) -> dict:
    def row_in_state():
        row = other_row(side, other)
        return row if row and row["state"] in wanted else None
    return eventually(row_in_state, f"other to become one of {sorted(wanted)}", timeout=timeout, interval=1,
                      explain=lambda: other_row(side, other))


def state_file_of(g, other) -> "tuple[str, Path]":
    """(session id, host path of its hook state file), found by name wherever chtop keeps it."""
    record = json.loads((g.grouping / ".chtop" / "sessions" / f"{other.name}.json").read_text())
    sid = record["session_id"]
    found = eventually(lambda: [p for p in g.grouping.rglob(sid) if p.is_file()], f"a state file {sid} under {g.grouping}",
                       timeout=60, interval=1)
    return sid, found[0]


def rootless(g, api) -> Side:
    g.env.update(prepare_claude_group(g, api, g.home / ".config" / "chtop", (g.user.pw_uid, g.user.pw_gid)))

    def inv(*args, cwd=None, timeout=180):
        return g.inv(*args, cwd=cwd or g.dev, timeout=timeout)
    return Side(g, inv, lambda argv: as_user(g.user, argv, g.env, g.base, check=False), g.base / "run")


def rootful(g, api, tmp_path) -> Side:
    root_env = rootful_podman_env(tmp_path)
    secrets_dir = Path(root_env["XDG_CONFIG_HOME"]) / "chtop"
    env = dict(root_env, **prepare_claude_group(g, api, secrets_dir, (g.user.pw_uid, g.user.pw_gid)))
    subprocess.run(["chown", "-R", "0:0", str(secrets_dir)], check=True)

    def inv(*args, cwd=None, timeout=180):
        return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd or g.dev, env=env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)

    def run(argv):
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    return Side(g, inv, run, Path(env["XDG_RUNTIME_DIR"]))


@pytest.fixture(params=["rootless", pytest.param("rootful", marks=pytest.mark.rootful)])
def side(request, remote_template, tmp_path):
    need("claude")
    need("tmux")
    api = FakeAnthropic([text("First answer of other."), text("Second answer of other.")])
    with user_group_cm(remote_template, extra_worktrees=("other",)) as g:
        side = rootless(g, api) if request.param == "rootless" else rootful(g, api, tmp_path)
        seed = g.grouping / "claude" / ".claude.json"
        data = json.loads(seed.read_text())
        data["projects"][str(g.grouping / "other")] = {"hasTrustDialogAccepted": True}
        seed.write_text(json.dumps(data))
        subprocess.run(["chown", f"{g.user.pw_uid}:{g.user.pw_gid}", str(seed)], check=True)
        try:
            yield side, api
        finally:
            for sock in side.run_dir.glob("chtop-*/*/tmux.sock"):
                side.run(["tmux", "-S", str(sock), "kill-server"])
            for name in containers(g, side.run):
                side.run(["podman", "rm", "-f", "-t", "0", name])
            api.close()


def test_one_worktrees_agent_cannot_reach_anothers(side):
    side, api = side
    g, inv = side.g, side.inv
    other = g.grouping / "other"

    # other's agent runs a session: its transcript holds its prompt, its state file says idle/waiting
    started = inv("session.start", "--", f"please remember {OTHER_SECRET}", cwd=other, timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    api.wait_for_turns(1)
    wait_other(side, other, {"idle", "waiting"})
    sid, state_file = state_file_of(g, other)
    eventually(lambda: state_file.read_text().strip() in ("idle", "waiting"), "other's hook to report idle or waiting",
               timeout=60, interval=1, explain=state_file.read_text)
    state_before = state_file.read_bytes()

    # dev's agent attacks from its sandbox
    attack = inv("sbox.run", "--", "sh", "-c", ATTACK, "attack", str(state_file), timeout=180)
    assert attack.returncode == 0, attack.stdout + attack.stderr
    assert "WROTE-NOTE" in attack.stdout, attack.stdout + attack.stderr     # its own dir is its own
    lines = attack.stdout.splitlines()
    cfg = next(line[4:] for line in lines if line.startswith("CFG:"))
    problems = [line for line in lines if line.startswith(("READ:", "WROTE-STATE:")) or line == f"WROTE-SETTINGS:{cfg}"]
    problems += [f"the hook is in {path}" for path in g.grouping.rglob("settings.json") if PWNED in path.read_text()]
    time.sleep(3)                                                           # the watcher polls each second
    if state_file.read_bytes() != state_before:
        problems.append(f"other's state file now says {state_file.read_text().strip()!r}")

    # other's agent starts again and takes a prompt: dev's hook never runs, dev's note is not there
    stopped = inv("session.stop", "--name", "other", cwd=g.toplevel)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    again = inv("session.start", "--", SECOND_PROMPT, cwd=other, timeout=180)
    assert again.returncode == 0, again.stdout + again.stderr
    api.wait_for_turns(2)
    assert SECOND_PROMPT in json.dumps(api.conversations()[-1])
    wait_other(side, other, {"idle", "waiting"})
    if (other / "alpha" / PWNED).exists():
        problems.append("dev's hook ran in other's sandbox")
    look = inv("sbox.run", "--", "sh", "-c", LOOK, cwd=other, timeout=180)
    assert look.returncode == 0, look.stdout + look.stderr
    problems += [line for line in look.stdout.splitlines() if line.startswith("SEEN:")]
    assert problems == [], "\n".join(problems)
    assert inv("session.stop", "--name", "other", cwd=g.toplevel).returncode == 0
