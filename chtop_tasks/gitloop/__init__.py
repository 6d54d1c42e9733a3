"""The cross-repo git loop: status, diff, pull, rebase-down, merge-up and push across a
worktree's repos, and their remotes."""
