"""Each worktree's private git stores: their layout, the import of the agent's branches from
them, and the walk that finds anything planted in them."""
