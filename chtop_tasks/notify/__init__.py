"""Pushing held requests and waiting agents to the user's phone through ntfy, answered with a tap.

- ``config``: the user's ntfy settings in ``<chtop config dir>/notify.toml`` (mode 0600);
- ``codes``: the one-time codes an action button carries (HMAC with a secret that stays on the host);
- ``ntfy``: the HTTP client (publish JSON with action buttons, subscribe to a JSON stream);
- ``held``: the notifier run beside a group's proxy (a control-socket watcher);
- ``waiting``: the one push a session sends when its agent waits.
"""
