"""The warm launcher: ``inv sbox.claude`` (and ``sbox.agent``, ``sbox.shell``) on a terminal without
paying Python's imports again.

A launch's own work after its imports is about 16 ms; its imports (``subprocess``, ``pathlib``,
``re``, ``json``, ``socket``, pexpect, chtop's launch modules) cost more than twice that.  So the
first launch in a worktree leaves a small server behind (``server.py``) that has them imported
and waits on a socket in your private runtime dir; the next ``inv sbox.claude`` there
(``client.py``, which imports only ``_socket`` and ``_signal``) hands it this terminal's fds, its
argv, cwd and environment, and the server forks a child that runs exactly what ``inv`` would have
run (``chtop_tasks.inv.main``), with your environment and cwd, on your terminal.  The client
passes on the signals it gets and exits with the child's status.

Nothing here changes what a launch does; only where its imports were paid.  The server refuses
(and the client runs the launch itself, cold) when any module it loaded changed on disk since,
when the Python or its start-up environment differ, or when it is not yours; it leaves after
``IDLE_SECONDS`` without a launch or when its worktree is gone.  ``CHTOP_WARM=0`` turns it off.
The socket lives in ``places.runtime_base()`` (0700, yours), which no sandbox mounts.
"""
