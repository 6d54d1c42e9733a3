"""The coding agents: which CLIs exist, their credentials, and how they are started.

- ``registry``: ``agents.toml`` (shipped + the user's), the agent's env, ``sbox.claude``/``sbox.agent``.
- ``secrets``: ``secrets.env``, parsed (never sourced) and permission-checked.
- ``image``: the optional local image (``sbox.build-image``, ``--image``).
- ``interactive``: the pexpect pass-through for a child on a terminal.

May import: ``errors``, ``runner``, ``places``, ``workspace`` and ``sandbox``;
never ``tasks``.
"""
