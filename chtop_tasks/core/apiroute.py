"""The credential route as a sandbox sees it: the proxy's address inside, the route's URL, the placeholder.

An agent's CLI inside a sandbox is given ``route_url(agent)`` as its API base URL and ``PLACEHOLDER`` as
its key or token; the proxy (``proxy/credentials.py``) replaces the placeholder with the real credential
on the way out.  The agents' registry and the proxy both speak this vocabulary, so it lives here.
"""

RELAY_PORT = 3128              # where the sandbox's relay to the proxy listens, inside (127.0.0.1)
PREFIX = "/chtop-api/"
PLACEHOLDER = "chtop-placeholder-credential-held-by-the-proxy"
ROUTE_HOSTS = {f"127.0.0.1:{RELAY_PORT}", f"localhost:{RELAY_PORT}"}


def route_url(agent: str) -> str:
    """The base URL an agent's CLI is given inside its sandbox."""
    return f"http://127.0.0.1:{RELAY_PORT}{PREFIX}{agent}"
