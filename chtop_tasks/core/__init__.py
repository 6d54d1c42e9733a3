"""The core helpers every concern uses: typed errors, the one runner and the guarded git runner,
output, atomic writes, safe reads of agent-written files, the fan-out, where everything lives."""
