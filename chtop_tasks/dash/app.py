"""The Textual application of ``inv dash``: tables and keys over ``model`` and ``actions``.

Every probe runs in a thread worker (never on the UI thread); a watcher
thread keeps the proxy holding blocked requests and wakes the app when one
arrives; with hosts recorded, ``remote`` polls each one in its own threads
(its rows carry its name; a host that does not answer is greyed out).  Keys that hand the terminal to another program (attach, shell,
rebase-down, merge-up, new worktree) suspend the app and resume it after.  On another host's row the
worktree keys run that host's own tasks over ssh, as their ``--host`` forms do (``actions``).

Every text a widget shows goes through ``plain``: a rich ``Text`` (never parsed as Rich markup,
where ``[@click=...]`` in a git error would be an action) with its control characters made visible
(``term.inert``: an ESC in a diff would reach your terminal).  ``tests/security/test_inert_text.py`` walks
this package's widget calls for it.
"""

from __future__ import annotations

import time
from concurrent.futures import CancelledError

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Static

from ..core.errors import ChtopError
from ..core.term import inert
from ..hosts.records import LOCAL, load_hosts
from ..proxy.watch import refused_anyway_text
from ..workspace.layout import Workspace, find_workspace
from . import actions, model, remote
from .holds import HoldWatcher

REFRESH_SECONDS = 2.0
DIM = "dim"              # the rows of a host that did not answer
WIDE_COLUMNS = 120       # narrower: requests above the diff instead of beside it
# the worktrees table's columns that give way, in this order, when the table is wider than the screen
# (never a sideways scrollbar): the sandbox's memory, its cpu, the pending requests' count, the host
DROP_ORDER = ("mem", "cpu", "req", "host")
TABLE_FRAME = 3          # the table's left edge and its vertical scrollbar's width
CELL_PADDING = 2         # DataTable's padding around each cell
LOAD_SECONDS = 5.0
BUSY_SHARE = 0.25        # refresh no more often than 4x the time one refresh takes (keeps CPU for the agents)


def plain(text: str, style: str = "") -> Text:
    """What a widget shows: ``text`` as is (no markup), its control characters visible."""
    return Text(inert(text), style=style)


class ConfirmScreen(ModalScreen[bool]):
    """A plan and a question: y runs it, anything else (n, Escape) does not."""

    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n", "answer(False)", "no"),
                Binding("escape", "answer(False)", "no")]

    def __init__(self, title: str, body: str, can_proceed: bool):
        super().__init__()
        self.title_text, self.body, self.can_proceed = title, body, can_proceed

    def compose(self) -> ComposeResult:
        question = "run it? [y/N]" if self.can_proceed else "refused (nothing was changed) - press n or Escape"
        with Vertical(id="dialog"):
            yield Static(plain(self.title_text, style="bold"))
            with VerticalScroll():
                yield Static(plain(self.body))
            yield Static(plain(question, style="bold"))

    def action_answer(self, yes: bool) -> None:
        self.dismiss(bool(yes and self.can_proceed))


class AskScreen(ModalScreen[str | None]):
    """One line of input (a worktree name, a duration); Escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, prompt: str, value: str = ""):
        super().__init__()
        self.prompt, self.value = prompt, value

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(plain(self.prompt, style="bold"))
            yield Input(value=self.value, id="answer")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


# every widget a worker's answer, a key or a focus change fills (``widgets_gone``)
FILLED_WIDGETS = ("#worktrees", "#pending", "#status", "#alert", "#message", "#diff", "#diff-title", "#load-note",
                  "#keys")


class DashApp(App):
    """One screen: worktrees (top), pending requests and the diff of the selected worktree (below)."""

    TITLE = "chtop mission control"
    CSS = """
    #status { height: 1; padding: 0 1; background: $boost; }
    #message { height: auto; max-height: 5; padding: 0 1; color: $warning; }
    #load-note { height: auto; padding: 0 1; color: $text-muted; display: none; }
    #alert { height: auto; max-height: 5; padding: 0 1; color: $error; display: none; }
    #worktrees { height: auto; max-height: 45%; overflow-x: hidden; }
    #lower { height: 1fr; }
    #pending-box { width: 1fr; }
    #diff-box { width: 1fr; border-left: solid $primary; }
    #lower.stacked { layout: vertical; }
    #lower.stacked #pending-box { height: auto; max-height: 50%; }
    #lower.stacked #diff-box { height: 1fr; border-left: none; }
    DataTable { border-left: blank; }
    DataTable:focus { border-left: tall $accent; }
    .pane-title { height: auto; padding: 0 1; background: $primary-background; }
    #keys { height: auto; padding: 0 1; background: $panel; }
    ConfirmScreen, AskScreen { align: center middle; }
    #dialog { width: 90%; height: auto; max-height: 80%; border: thick $primary; padding: 1 2;
              background: $surface; }
    """
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("u", "refresh", "update"),
        Binding("tab", "focus_next", "switch table", show=False),
        Binding("a", "attach", "attach"),
        Binding("s", "start_session", "start"),
        Binding("x", "stop_session", "stop"),
        Binding("r", "git_task('git.rebase-down')", "rebase-down"),
        Binding("m", "git_task('git.merge-up')", "merge-up"),
        Binding("h", "shell", "shell"),
        Binding("n", "new_worktree", "new wt"),
        Binding("f", "toggle_full", "stat/full"),
        # the pending pane's keys, named in its title
        Binding("g", "decide('group')", "allow group", show=False),
        Binding("w", "decide('worktree')", "allow worktree", show=False),
        Binding("o", "decide('once')", "allow once", show=False),
        Binding("t", "decide('for')", "allow for a while", show=False),
        Binding("d", "decide('deny')", "deny", show=False),
        Binding("p", "toggle_private", "private addresses", show=False),
    ]

    def __init__(self, top: Workspace, sessions=None, refresh_seconds: float = REFRESH_SECONDS,
                 hold_requests: bool = True, sandbox_load: bool = True, hosts=(),
                 host_seconds: float = remote.POLL_SECONDS):
        super().__init__()
        self.hosts, self.host_seconds = list(hosts), host_seconds     # other machines (hosts.records.Host)
        self.fleet: remote.Fleet | None = None
        self.top = top
        self.sessions = sessions
        self.refresh_seconds = refresh_seconds
        self.hold_requests = hold_requests
        self.with_load = sandbox_load
        self.snapshot: model.Snapshot | None = None
        self.load: dict = {}
        self.full_diff = False
        self.private = False
        self.message = ""
        self.alert = ""          # an allowed request the proxy refused anyway
        self.watcher: HoldWatcher | None = None
        self._diff_for: str | None = None
        self._diff_asked = 0     # the number of the newest diff request: an older one's answer is dropped
        self.blocked = model.BlockedTail(top.grouping)
        self._next_refresh = None
        self._held_shown: list[str] = []      # the held rows last shown: a new one is selected

    # -- layout ------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="status")
        yield Static(id="alert")
        yield Static(id="message")
        yield DataTable(id="worktrees", cursor_type="row", zebra_stripes=True)
        yield Static(id="load-note")
        with Horizontal(id="lower"):
            with Vertical(id="pending-box"):
                yield Static("pending requests  g group  w wt only  o once  t for a while  d deny  p private",
                             classes="pane-title", id="pending-title")
                yield DataTable(id="pending", cursor_type="row")
            with Vertical(id="diff-box"):
                yield Static("diff vs integration (f: stat/full)", classes="pane-title", id="diff-title")
                with VerticalScroll(id="diff-scroll"):
                    yield Static(id="diff")
        yield Static(id="keys")

    def on_mount(self) -> None:
        self.query_one("#worktrees", DataTable).focus()
        self.show_keys()
        if self.hold_requests:
            self.watcher = HoldWatcher(self.top.grouping, self._on_proxy_event).start()
        self.refresh_data()
        if self.hosts:
            self.fleet = remote.Fleet(self.hosts, self._on_remote, self.host_seconds, self.hold_requests).start()
        if self.with_load:
            self.refresh_load()
            self.set_interval(LOAD_SECONDS, self.refresh_load)

    def on_unmount(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        if self.fleet is not None:
            self.fleet.stop()

    def _on_remote(self, state: remote.RemoteState) -> None:
        """From a host's poller thread: its new answer (or why none) is shown."""
        try:
            self.call_from_thread(self.show_tables)
        except (RuntimeError, CancelledError):        # the app is closing (or has closed)
            pass

    # -- data (thread workers) -------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="snapshot")
    def refresh_data(self) -> None:
        try:
            snap = model.take_snapshot(self.top, self.sessions, self.load, self.blocked)
        except ChtopError as exc:
            self.call_from_thread(self.say, f"refresh failed: {exc}")
            self.call_from_thread(self.schedule_refresh, self.refresh_seconds)
            return
        self.call_from_thread(self.show_snapshot, snap)
        self.call_from_thread(self.schedule_refresh, max(self.refresh_seconds, snap.took / BUSY_SHARE))

    def schedule_refresh(self, delay: float) -> None:
        """The next refresh, ``delay`` from now (one timer at a time; a key or proxy event may come first)."""
        if self._next_refresh is not None:
            self._next_refresh.stop()
        self._next_refresh = self.set_timer(delay, self.refresh_data)

    @work(thread=True, exclusive=True, group="load")
    def refresh_load(self) -> None:
        self.call_from_thread(self.show_load, model.sandbox_load(self.top.grouping))

    def show_load(self, load: model.SandboxLoad) -> None:
        """The next refresh's cpu/mem cells; below the table, why they say n/a (if they do)."""
        self.load = load.by_worktree
        if self.widgets_gone():
            return
        note = self.query_one("#load-note", Static)
        note.update(plain(load.unavailable))
        note.display = bool(load.unavailable)

    def refresh_diff(self, name: str) -> None:
        """Ask for ``name``'s diff as the pane now shows it (stat or full); only the newest request's
        answer is shown: a thread worker is not stopped by a newer one, and a slower, older answer (the
        stat diff still running when ``f`` asked for the full one) would otherwise overwrite it.
        Another host's worktree: that host's own ``git.diff --integration``, asked over ssh."""
        self._diff_asked += 1
        self.diff_worker(name, self.full_diff, self._diff_asked, self.remote_row(name))

    @work(thread=True, group="diff")
    def diff_worker(self, name: str, full: bool, asked: int, row: remote.RemoteRow | None = None) -> None:
        try:
            if row is not None:
                text = actions.remote_diff(row, full)
            else:
                text = model.worktree_diff(find_workspace(self.top.worktree_root(name)), full)
        except ChtopError as exc:
            text = f"cannot diff {name}: {exc}"
        self.call_from_thread(self.show_diff, name, text, asked)

    def _on_proxy_event(self, event: dict) -> None:
        """From the watcher thread: a blocked request is held, an allowed one refused anyway (or the
        proxy came or went)."""
        try:
            if event.get("event") == "refused":
                self.call_from_thread(self.show_refusal, event)
            self.call_from_thread(self.refresh_data)
        except (RuntimeError, CancelledError):        # the app is closing (or has closed)
            pass

    # -- showing -------------------------------------------------------------------------------------
    def widgets_gone(self) -> bool:
        """The app is closing: a worker's answer that comes back now has nothing to fill.  Any of the
        filled widgets counts, since they go one at a time (the tables, the status and key lines):
        with ``#worktrees`` alone, a refresh between two removals failed on ``#pending``."""
        return any(not self.query(selector) for selector in FILLED_WIDGETS)

    def show_snapshot(self, snap: model.Snapshot) -> None:
        self.snapshot = snap
        if self.widgets_gone():
            return
        self.show_tables()
        self.diff_selected()

    def show_tables(self) -> None:
        """Both tables from the last local snapshot and every host's last answer; with hosts
        recorded each row starts with its host (``local`` for this machine's)."""
        snap = self.snapshot
        if snap is None or self.widgets_gone():
            return
        was_selected, was_held = self.selected_pending(), self._held_shown
        now, hosts = time.time(), self.remote_states()
        host_cell = [LOCAL] if self.hosts else []
        rows = []
        for wt in snap.worktrees:
            if wt.problem:
                cells = [f"! {wt.problem}"] + [""] * (len(snap.repo_labels) - 1)
            else:
                cells = [r.cell(wt.name) for r in wt.repos]
                cells += [""] * (len(snap.repo_labels) - len(cells))
            agent = " ".join(filter(None, model.describe_session(wt.session, now)))
            rows.append((wt.name, [*host_cell, wt.name_cell(), *cells, agent, str(wt.pending or ""), wt.cpu, wt.mem]))
        dim = set()
        for state in hosts:
            host_rows = remote.worktree_rows(state, snap.repo_labels, now)
            rows += host_rows
            dim |= set() if state.reachable else {key for key, _ in host_rows}
        columns = [*(["host"] if self.hosts else []), "worktree", *snap.repo_labels, "agent", "req", "cpu", "mem"]
        keep = fitting_columns(columns, rows, self.size.width - TABLE_FRAME, fixed_from=len(columns) - 4,
                               has_host=bool(self.hosts))
        fill_table(self.query_one("#worktrees", DataTable), [columns[i] for i in keep],
                   [(key, [cells[i] for i in keep]) for key, cells in rows], dim)
        pending = []
        for item in self.all_pending():
            when = time.strftime("%H:%M:%S", time.localtime(item["last"])) if item["last"] else ""
            pending.append((pending_key(item), [*([item.get("remote") or LOCAL] if self.hosts else []), item["spec"],
                                                item["worktree"] or "(group)", str(item["count"]),
                                                when, "HELD" if item["held"] else ""]))
        fill_table(self.query_one("#pending", DataTable),
                   [*(["host"] if self.hosts else []), "domain", "worktree", "count", "last seen", "held"], pending)
        self._held_shown = held_keys(self.all_pending())
        newly_held = [key for key in self._held_shown if key not in was_held]
        if newly_held and not (was_selected and was_selected["held"]):      # any host's: its key answers it
            select_key(self.query_one("#pending", DataTable), newly_held[0])
        self.update_status()

    def remote_states(self) -> list[remote.RemoteState]:
        return self.fleet.states() if self.fleet is not None else []

    def all_pending(self) -> list[dict]:
        """This machine's pending requests, then each reachable host's (``remote``: its name)."""
        local = self.snapshot.pending if self.snapshot is not None else []
        return local + [item for state in self.remote_states() for item in state.pending]

    def diff_selected(self) -> None:
        """Refresh the diff pane when the selected worktree is not the one it shows."""
        name = self.selected_name()
        if name and name != self._diff_for:
            self._diff_for = name
            self.refresh_diff(name)

    def show_diff(self, name: str, text: str, asked: int) -> None:
        if asked != self._diff_asked or self.widgets_gone() or name != self.selected_name():
            return
        self.query_one("#diff-title", Static).update(
            plain(f"diff of {name} vs integration ({'full' if self.full_diff else 'stat'}; f toggles)"))
        wt = self.snapshot.worktree(name) if self.snapshot is not None else None
        if wt is not None and wt.venv_note:
            text = f"! {wt.venv_note}\n\n{text}"
        self.query_one("#diff", Static).update(plain(text))

    def update_status(self) -> None:
        if self.widgets_gone():
            return
        snap = self.snapshot
        parts = []
        if snap is not None:
            proxy = "proxy running" if snap.proxy_running else "proxy stopped"
            if self.watcher is not None and self.watcher.attached:
                proxy += ", holding blocked requests"
            parts += [proxy, f"private {'ON' if self.private else 'off'}", f"{len(snap.worktrees)} worktrees"]
            if self.size.width >= WIDE_COLUMNS:
                parts.append(f"refresh {snap.took * 1000:.0f} ms")
            if not snap.sessions_available:
                parts.append("sessions: not available")
            if self.hosts:
                parts.append("hosts: " + ", ".join(remote.status_part(state) for state in self.remote_states()))
        parts.append(f"group {self.top.grouping.name}")     # its name: the whole path is cut at 80 columns
        self.query_one("#status", Static).update(plain((" | " if self.size.width < WIDE_COLUMNS else "  |  ").join(parts)))
        alert = self.query_one("#alert", Static)
        alert.update(plain(self.alert, style="bold"))
        alert.display = bool(self.alert)
        self.query_one("#message", Static).update(plain(self.message))

    def show_refusal(self, event: dict) -> None:
        """An allow the proxy then refused anyway (as ``net.watch`` reports it); it stays up until the
        next decision, whatever message comes meanwhile."""
        self.alert = refused_anyway_text(event)
        if "non-public address" in str(event.get("reason")):
            self.alert += "; to let it reach a private address press p, then allow it again"
        self.update_status()

    def say(self, message: str) -> None:
        self.message = message.replace("\n", " ")
        self.update_status()

    # -- selection -----------------------------------------------------------------------------------
    def selected_name(self) -> str | None:
        if self.widgets_gone():
            return None
        table = self.query_one("#worktrees", DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def selected_worktree(self) -> model.WorktreeState | None:
        name = self.selected_name()
        return self.snapshot.worktree(name) if (name and self.snapshot) else None

    def remote_row(self, name: str | None) -> remote.RemoteRow | None:
        """The row ``name`` when it is another host's (``HOST:WORKTREE``, or ``HOST:`` when that host
        has no rows now); None for this machine's."""
        if not name or ":" not in name:
            return None
        host, worktree = name.split(":", 1)
        state = next((s for s in self.remote_states() if s.host.name == host), None)
        return remote.row_of(state, worktree) if state is not None else None

    def selected_pending(self) -> dict | None:
        if self.widgets_gone():
            return None
        table = self.query_one("#pending", DataTable)
        if not table.row_count or self.snapshot is None:
            return None
        key = str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        return next((p for p in self.all_pending() if pending_key(p) == key), None)

    def on_resize(self, event) -> None:
        """Below WIDE_COLUMNS the requests and the diff are stacked, each the whole width; the
        worktrees table drops or takes back the columns that fit (``fitting_columns``)."""
        self.query_one("#lower").set_class(event.size.width < WIDE_COLUMNS, "stacked")
        self.show_tables()

    def on_descendant_focus(self, event) -> None:
        self.show_keys()

    def show_keys(self) -> None:
        """The key line: what Up/Down moves now and that Tab switches (the focused table also has a
        coloured left edge), then the shown BINDINGS (the keys on the selected worktree)."""
        if self.widgets_gone():
            return
        moving = "requests" if self.focused is self.query_one("#pending") else "worktrees"
        other = "worktrees" if moving == "requests" else "requests"
        keys = "  ".join(f"{b.key} {b.description}" for b in self.BINDINGS if b.show)
        self.query_one("#keys", Static).update(plain(f"Up/Down: {moving}  Tab: {other}  |  {keys}"))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "worktrees":
            self.diff_selected()          # where the cursor is now (a refresh may have moved it since)

    # -- keys ------------------------------------------------------------------------------------------
    def action_refresh(self) -> None:
        self.refresh_data()

    def action_toggle_full(self) -> None:
        self.full_diff = not self.full_diff
        name = self.selected_name()
        if name:
            self.refresh_diff(name)

    def action_toggle_private(self) -> None:
        self.private = not self.private
        self.say("approvals now allow private addresses" if self.private else "approvals: public addresses only")

    def action_decide(self, scope: str) -> None:
        self.alert = ""
        item = self.selected_pending()
        if item is None:
            self.say("no pending request selected")
            return
        if scope == "for":
            self.push_screen(AskScreen(f"allow {item['spec']} for how long? (e.g. 15m, 2h, 1d)",
                                       actions.ALLOW_FOR_DEFAULT),
                             lambda ttl: ttl and self.run_decision(item, scope, ttl))
            return
        self.run_decision(item, scope, None)

    @work(thread=True, group="decide")
    def run_decision(self, item: dict, scope: str, ttl: str | None) -> None:
        try:
            if item.get("remote"):
                host = next(h for h in self.hosts if h.name == item["remote"])
                lines = actions.decide_remote(host, item, scope, ttl, self.private)
            else:
                lines = actions.decide(self.top, item, scope, ttl, self.private)
            message = f"{actions.KEY_SCOPES[scope]}: " + "; ".join(lines)
        except ChtopError as exc:
            message = f"error: {exc}"
        self.call_from_thread(self.say, message)
        if item.get("remote") and self.fleet is not None:
            self.fleet.poke(item["remote"])
        self.call_from_thread(self.refresh_data)

    def _worktree_or_say(self) -> model.WorktreeState | None:
        wt = self.selected_worktree()
        if wt is None or wt.problem:
            self.say("no usable worktree selected")
            return None
        return wt

    def selected_remote(self) -> remote.RemoteRow | None:
        """The selected row when it is another host's: its keys run that host's own tasks there."""
        return self.remote_row(self.selected_name())

    def run_remote(self, what: str, row: remote.RemoteRow, build_argv, pause: bool = True) -> None:
        """``build_argv()`` (an ``ssh -t`` into the host) run on the terminal, or why it cannot be."""
        try:
            argv = build_argv()
        except ChtopError as exc:
            self.say(f"error: {exc}")
            return
        self.run_suspended(argv, self.top.toplevel, pause=pause, label=f"{what} {row.host.name}:{row.worktree}")

    def action_attach(self) -> None:
        row = self.selected_remote()
        if row is not None:
            self.run_remote("attach", row, lambda: actions.remote_attach_argv(row), pause=False)
            return
        wt = self._worktree_or_say()
        if wt is None:
            return
        try:
            argv = actions.attach_argv(self.top, wt.name, wt.session)
        except ChtopError as exc:
            self.say(f"error: {exc}")
            return
        self.run_suspended(argv, wt.root, pause=False)

    def action_start_session(self) -> None:
        row = self.selected_remote()
        if row is not None:
            self.say(f"starting a session on {row.host.name} ...")
            self.session_call(lambda: actions.remote_start_session(row), row.host.name)
            return
        wt = self._worktree_or_say()
        if wt is not None:
            self.session_call(lambda: actions.start_session(find_workspace(wt.root)))

    def action_stop_session(self) -> None:
        row = self.selected_remote()
        if row is not None:
            self.say(f"stopping the session on {row.host.name} ...")
            self.session_call(lambda: actions.remote_stop_session(row), row.host.name)
            return
        wt = self._worktree_or_say()
        if wt is not None:
            self.session_call(lambda: actions.stop_session(self.top, wt.name, wt.session))

    @work(thread=True, group="session")
    def session_call(self, call, host: str = "") -> None:
        try:
            message = call()
        except ChtopError as exc:
            message = f"error: {exc}"
        self.call_from_thread(self.say, message)
        if host and self.fleet is not None:          # that host's rows: asked again now
            self.fleet.poke(host)
        self.call_from_thread(self.refresh_data)

    def action_git_task(self, task: str) -> None:
        row = self.selected_remote()
        if row is not None:
            try:
                args = actions.remote_task_args(row)
            except ChtopError as exc:
                self.say(f"error: {exc}")
                return
            where, cwd = f"{row.host.name}:{row.worktree}", self.top.toplevel
        else:
            wt = self._worktree_or_say()
            if wt is None:
                return
            args, where, cwd = (), wt.name, wt.root
        self.say(f"planning {task} in {where} ...")
        self.plan_git_task(task, where, cwd, args)

    @work(thread=True, group="plan")
    def plan_git_task(self, task: str, where: str, cwd, args: tuple[str, ...] = ()) -> None:
        """``task``'s dry run (another host's worktree: ``--host H --name N``, the host's own plan),
        shown for confirmation; ``y`` runs it on the terminal."""
        text, ok = actions.dry_run(cwd, task, *args)
        shown = " ".join((task, *args, "--dry-run"))
        screen = ConfirmScreen(f"{task} in {where} (inv {shown}):", text, ok)

        def answered(yes: bool) -> None:
            if yes:
                self.run_suspended(actions.confirmed_argv(task, text, *args), cwd)
            else:
                self.say(f"{task} in {where}: not run")
        self.call_from_thread(self.push_screen, screen, answered)

    def action_shell(self) -> None:
        row = self.selected_remote()
        if row is not None:
            self.run_remote("shell", row, lambda: actions.remote_shell_argv(row))
            return
        wt = self._worktree_or_say()
        if wt is not None:
            self.run_suspended(actions.inv_argv("sbox.shell"), wt.root)

    def action_new_worktree(self) -> None:
        def create(name: str | None) -> None:
            if name:
                self.run_suspended(actions.inv_argv("worktree.create", "--name", name), self.top.toplevel)
        self.push_screen(AskScreen("new worktree name (inv worktree.create --name NAME):"), create)

    def run_suspended(self, argv: list[str], cwd, pause: bool = True, label: str = "") -> None:
        """Hand the terminal to ``argv`` until it exits, then come back and refresh (``label``: what
        the message calls it; by default its last two words)."""
        try:
            with self.suspend():
                code = actions.run_in_terminal(argv, cwd, pause=pause)
        except Exception as exc:  # SuspendNotSupported (no real terminal), a missing program
            self.say(f"cannot run {argv[0]}: {exc}")
            return
        self.say(f"{label or ' '.join(argv[-2:])}: exit {code}")
        self._diff_for = None
        self.refresh_data()


def pending_key(item: dict) -> str:
    """A pending row's key: another host's rows start with ``@HOST|`` (a host name has no '|')."""
    where = f"@{item['remote']}|" if item.get("remote") else ""
    return f"{where}{item['spec']}|{item['worktree'] or ''}"


def held_keys(pending: list[dict]) -> list[str]:
    """The pending rows a proxy holds open (what ``o`` can let through), in the pane's order."""
    return [pending_key(p) for p in pending if p["held"]]


def select_key(table: DataTable, key: str) -> None:
    keys = [str(k.value) for k in table.rows]
    if key in keys:
        table.move_cursor(row=keys.index(key))


def fitting_columns(columns: list[str], rows: list[tuple[str, list[str]]], width: int, *, fixed_from: int,
                    has_host: bool) -> list[int]:
    """The positions of the columns shown in ``width``: all that fit, else those of ``DROP_ORDER``
    dropped one at a time (the last four columns are agent, req, cpu, mem from ``fixed_from`` on, the
    host the first with ``has_host``); the worktree, its repos and its agent always stay."""
    where = {"req": fixed_from + 1, "cpu": fixed_from + 2, "mem": fixed_from + 3, "host": 0 if has_host else None}

    def needed(keep: list[int]) -> int:
        return sum(max([len(columns[i]), *(len(cells[i]) for _, cells in rows)]) + CELL_PADDING for i in keep)

    keep = list(range(len(columns)))
    for name in DROP_ORDER:
        if needed(keep) <= width:
            break
        if where[name] is not None:
            keep.remove(where[name])
    return keep


def fill_table(table: DataTable, columns: list[str], rows: list[tuple[str, list[str]]], dim=frozenset()) -> None:
    """Show ``rows`` (key, cells): in place when the rows and columns are the same as shown, else rebuilt
    (columns too, so their widths fit), keeping the cursor on the same key; the rows keyed in ``dim``
    greyed out (a host that did not answer)."""
    keys = [key for key, _ in rows]
    shown_columns = [str(c.label) for c in table.columns.values()]
    shown_keys = [str(k.value) for k in table.rows]
    if shown_columns == [inert(c) for c in columns] and shown_keys == keys:
        for key, cells in rows:
            for i, value in enumerate(cells):
                if str(table.get_cell(key, f"c{i}")) != inert(value):
                    table.update_cell(key, f"c{i}", plain(value, DIM if key in dim else ""), update_width=True)
        return
    selected = shown_keys[table.cursor_row] if shown_keys and 0 <= table.cursor_row < len(shown_keys) else None
    table.clear(columns=True)
    for i, column in enumerate(columns):          # keyed by position: a repo may be named "agent"
        table.add_column(plain(column), key=f"c{i}")
    for key, cells in rows:
        table.add_row(*map(plain, cells, [DIM if key in dim else ""] * len(cells)), key=key)
    if selected is not None:
        select_key(table, selected)


def run_dash(ws: Workspace, refresh_seconds: float = REFRESH_SECONDS) -> int:
    top = ws.for_root(ws.toplevel)
    DashApp(top, refresh_seconds=refresh_seconds, hosts=load_hosts().values()).run()
    return 0
