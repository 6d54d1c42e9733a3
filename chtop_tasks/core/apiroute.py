"""The credential route as a sandbox sees it: the proxy's address inside, the route's URL, the placeholder.

An agent's CLI inside a sandbox is given ``route_url(agent)`` as its API base URL and ``PLACEHOLDER`` as
its key or token; the proxy (``proxy/credentials.py``) replaces the placeholder with the real credential
on the way out.  The agents' registry and the proxy both speak this vocabulary, so it lives here.
"""

from dataclasses import dataclass

RELAY_PORT = 3128              # where the sandbox's relay to the proxy listens, inside (127.0.0.1)
PREFIX = "/chtop-api/"
PLACEHOLDER = "chtop-placeholder-credential-held-by-the-proxy"
ROUTE_HOSTS = {f"127.0.0.1:{RELAY_PORT}", f"localhost:{RELAY_PORT}"}


@dataclass(frozen=True)
class AuthScheme:
    """How an API takes its credential: the header, its value (``{}`` is the secret), and a query
    parameter the API also reads a key from ("" when none)."""

    header: str
    value: str = "{}"
    query: str = ""


# an agent's api_auth value -> how the proxy adds its secret; every header here is dropped from what
# a sandbox sends on the route, whichever agent it names
AUTH_SCHEMES = {
    "bearer": AuthScheme("Authorization", "Bearer {}"),             # Anthropic OAuth, OpenAI, Moonshot
    "x-api-key": AuthScheme("x-api-key"),                           # Anthropic API keys
    "x-goog-api-key": AuthScheme("x-goog-api-key", query="key"),    # Google's Gemini API
}


def route_url(agent: str) -> str:
    """The base URL an agent's CLI is given inside its sandbox."""
    return f"http://127.0.0.1:{RELAY_PORT}{PREFIX}{agent}"
