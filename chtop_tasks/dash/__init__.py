"""``inv dash``: one screen for every worktree, agent and pending approval.

``model`` gathers the data (git probes, sessions, sandboxes, pending
requests) off the UI thread and knows nothing of widgets; ``actions`` holds
the plain functions the keys call (the same ones as the tasks); ``app`` is
the Textual application.  Only ``app`` imports Textual.
"""
