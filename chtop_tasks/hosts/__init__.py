"""Other machines: hosts recorded in the user's chtop config, reached over OpenSSH.

Each host runs its own chtop (a toplevel there mirroring this one, installed from here with git
over SSH), podman and proxy; this side only asks it, over one reused connection per host
(ControlMaster), and treats every answer as a stranger's data.

- ``records``: the host records (``<config>/hosts.toml``) and the host-name rule;
- ``ssh``: the ssh argv and the runner over it (echoed, bounded, argv quoted for the remote shell);
- ``answers``: a remote JSON answer checked against its schema, every string made inert;
- ``install``: what a host has, and chtop installed or updated there from this toplevel;
- ``fleet``: the tasks' plain functions (add, list, update, remove, the remote worktrees and sessions);
- ``approvals``: a host's pending requests, asked and answered with its own ``net.*`` tasks;
- ``merge``: ``git.merge-up --host``, a host's worktree fetched into a quarantine and landed here.
"""
