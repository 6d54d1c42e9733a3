"""Make docs/dash.svg: the dashboard of a real workspace, with a real proxy holding a blocked request.

    python docs/dash_screenshot.py

Builds a throwaway group (5 worktrees of 4 repos, some dirty or ahead, one
repo behind its integration branch), starts its egress proxy, sends one
request it blocks, runs ``inv dash``'s app headless and saves what it shows.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_dash import build_group  # noqa: E402

from chtop_tasks.dash.app import DashApp  # noqa: E402
from chtop_tasks.proxy import control  # noqa: E402
from chtop_tasks.workspace.layout import find_workspace  # noqa: E402

NAMES = ["api-auth", "docs-fix", "kms-rework", "login-flow", "perf"]


def blocked_request(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"CONNECT files.pythonhosted.org:443 HTTP/1.1\r\n\r\n")
        s.recv(4096)


async def shoot(top, port: int, out: Path) -> None:
    app = DashApp(top, refresh_seconds=0.5, sandbox_load=False)
    async with app.run_test(size=(150, 34)) as pilot:
        while not (app.watcher.attached and app.snapshot):
            await pilot.pause(0.05)
        threading.Thread(target=blocked_request, args=(port,), daemon=True).start()
        pending = app.query_one("#pending")
        while not pending.row_count:
            await pilot.pause(0.05)
        await pilot.press("down", "down", "down", "down")   # select perf (one commit ahead in repo one)
        await pilot.pause(1.5)
        app.save_screenshot(out.name, str(out.parent))


def main() -> None:
    os.environ.update({"GIT_AUTHOR_NAME": "d", "GIT_AUTHOR_EMAIL": "d@d", "GIT_COMMITTER_NAME": "d",
                       "GIT_COMMITTER_EMAIL": "d@d", "CHTOP_PROXY_PORT": "29999"})
    with tempfile.TemporaryDirectory(prefix="chtop-shot-") as tmp:
        top_dir = build_group(Path(tmp), len(NAMES), NAMES)
        (top_dir / "two" / "f3.txt").write_text("upstream moved\n")
        subprocess.run(["git", "commit", "-qam", "upstream change"], cwd=top_dir / "two", check=True)
        top = find_workspace(top_dir)
        control.ensure_proxy(top.grouping, top.policy_dir)
        try:
            asyncio.run(shoot(top, 29999, ROOT / "docs" / "dash.svg"))
        finally:
            control.stop_proxy(top.grouping)
    print(f"wrote {ROOT / 'docs' / 'dash.svg'}")


if __name__ == "__main__":
    main()
