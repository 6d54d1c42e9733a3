"""The hosts of the package index pip and uv are configured for: what a venv build's sandbox may reach.

pip's index is ``$PIP_INDEX_URL``, else the last pip config file's ``index-url`` (``[install]`` over
``[global]``), else PyPI; its extra indexes and find-links pages (``PIP_EXTRA_INDEX_URL``,
``PIP_FIND_LINKS``, ``extra-index-url``, ``find-links``) are fetched too.  uv's is
``$UV_DEFAULT_INDEX`` or ``$UV_INDEX_URL``, else PyPI, plus ``UV_INDEX``, ``UV_EXTRA_INDEX_URL`` and
``UV_FIND_LINKS``.  ``PIP_NO_INDEX``/``UV_NO_INDEX`` drop that installer's index (its find-links
stay).  PyPI is two hosts: ``pypi.org`` (the index) and ``files.pythonhosted.org`` (the files).
Local paths and ``file:`` URLs name no host.  The result is a list of proxy allow entries (the
``net-allow.txt`` format): an explicit port is kept, and a loopback or private IP literal (a
mirror on this machine) gets ``private``.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

from .tls import pip_config_values

PYPI_HOSTS = ("pypi.org", "files.pythonhosted.org")
PYPI_URL = "https://pypi.org/simple"
TRUE = ("1", "true", "yes", "on")


def _words(value: str | None) -> list[str]:
    return (value or "").split()


def _pip_config(env) -> dict[str, str]:
    """pip's config values that name an index (``index-url``, ``extra-index-url``, ``find-links``,
    ``no-index``)."""
    found = pip_config_values(("index-url", "extra-index-url", "find-links", "no-index"), env)
    return {key: value for key, (value, _) in found.items()}


def index_urls(env=None) -> list[str]:
    """Every URL (or path) pip and uv fetch packages from, in that order, each once."""
    env = os.environ if env is None else env
    conf = _pip_config(env)
    urls: list[str] = []
    if str(env.get("PIP_NO_INDEX") or conf.get("no-index", "")).lower() not in TRUE:
        urls.append(env.get("PIP_INDEX_URL") or conf.get("index-url") or PYPI_URL)
        urls += _words(env.get("PIP_EXTRA_INDEX_URL") or conf.get("extra-index-url"))
    urls += _words(env.get("PIP_FIND_LINKS") or conf.get("find-links"))
    if str(env.get("UV_NO_INDEX", "")).lower() not in TRUE:
        urls.append(env.get("UV_DEFAULT_INDEX") or env.get("UV_INDEX_URL") or PYPI_URL)
        urls += _words(env.get("UV_INDEX")) + _words(env.get("UV_EXTRA_INDEX_URL"))
    urls += _words(env.get("UV_FIND_LINKS"))
    return list(dict.fromkeys(urls))


def host_entry(url: str) -> list[str]:
    """The allow entries ``url`` needs (none for a path or a ``file:`` URL)."""
    parts = urlsplit(url.split("=", 1)[1] if "=" in url.split("://", 1)[0] else url)   # uv's NAME=URL
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return []
    host = parts.hostname
    if urlsplit(PYPI_URL).hostname == host:
        return list(PYPI_HOSTS)
    try:
        port = parts.port
    except ValueError:
        return []
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    spec = f"[{host}]" if address is not None and address.version == 6 else host
    if port is not None and port not in (80, 443):
        spec += f":{port}"
    local = host == "localhost" or (address is not None and not address.is_global)
    return [spec + (" private" if local else "")]


def index_hosts(env=None) -> list[str]:
    """The proxy allow entries of every index pip and uv are configured for (see the module doc)."""
    entries: list[str] = []
    for url in index_urls(env):
        entries += host_entry(url)
    return list(dict.fromkeys(entries))


def without_credentials(value: str) -> str:
    """An index URL (or a space-separated list of them) with any ``user:token@`` removed: a build's
    sandbox runs the agent's code and gets no credentials."""
    out = []
    for word in value.split(" "):
        parts = urlsplit(word)
        if parts.scheme and "@" in parts.netloc:
            word = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
        out.append(word)
    return " ".join(out)
