"""The workspace and its git: where every checkout is, and the operations on them.

- ``layout``: the Workspace model (grouping dir, toplevel, worktrees, stores),
  found from any path by reading files only; ``verify_git_dirs``.
- ``rootfind``: the checkout around a path (what ``inv`` asks first, importing nothing else).
- ``manifest``: ``git_repositories.toml``, parsed and checked.
- ``toplevel``, ``worktrees``: ``toplevel.init``, ``worktree.create/delete/list``.
- ``dotfiles``: ``.envrc`` and ``.claude/env.sh`` rendered from ``dotfile_templates/``.

May import: ``chtop_tasks.core.errors``, ``runner``, ``term`` and ``places``;
never ``venv``, ``sandbox``, ``proxy``, ``agents`` or ``tasks``.
"""
