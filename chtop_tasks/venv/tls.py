"""uv gets the CA trust pip has: pip's ``cert`` (``$PIP_CERT``, else the last pip.conf that sets
it) becomes uv's ``SSL_CERT_FILE``.

uv reads neither pip's config nor its ``cert``, and trusts its own bundled roots; behind a
TLS-intercepting mirror whose CA is in pip.conf, pip works and uv fails (``invalid peer
certificate: UnknownIssuer``).  Where the user set ``SSL_CERT_FILE`` or ``UV_NATIVE_TLS``
already, uv keeps that, passed on by name: a feature worktree's build runs in its sandbox, whose
env allowlist would drop it (uv there failed with ``UnknownIssuer`` behind such a mirror).
"""

from __future__ import annotations

import configparser
import os
from pathlib import Path


def pip_config_files(env=None) -> list[Path]:
    """pip's config files, in the order it reads them (a later one wins)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    xdg = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    dirs = [d for d in (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":") if d]
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(dirs)] + [Path("/etc/pip.conf"),
             home / ".pip" / "pip.conf", xdg / "pip" / "pip.conf"]
    if env.get("VIRTUAL_ENV"):
        files.append(Path(env["VIRTUAL_ENV"]) / "pip.conf")
    if env.get("PIP_CONFIG_FILE") and env["PIP_CONFIG_FILE"] != os.devnull:
        files.append(Path(env["PIP_CONFIG_FILE"]))
    return files


def pip_config_values(keys: tuple[str, ...], env=None) -> dict[str, tuple[str, str]]:
    """pip's config values of ``keys``: key -> (value, where it is set); the last file that sets
    one wins, ``[install]`` over ``[global]``."""
    env = os.environ if env is None else env
    found: dict[str, tuple[str, str]] = {}
    for path in pip_config_files(env):
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (OSError, configparser.Error, UnicodeDecodeError):
            continue
        for section in ("global", "install"):
            for key in keys:
                value = parser.get(section, key, fallback="").strip()
                if value:
                    found[key] = (value, f"{path} [{section}] {key}")
    return found


def pip_cert(env=None) -> tuple[str, str] | None:
    """(the CA bundle pip uses, where that is said), or None when pip uses its default."""
    env = os.environ if env is None else env
    if env.get("PIP_CERT"):
        return env["PIP_CERT"], "$PIP_CERT"
    return pip_config_values(("cert",), env).get("cert")


def uv_trust_env(env=None) -> tuple[tuple[tuple[str, str], ...], str]:
    """The variables that give uv pip's trust, and a line saying which trust uv has."""
    env = os.environ if env is None else env
    if env.get("SSL_CERT_FILE"):
        return ((("SSL_CERT_FILE", env["SSL_CERT_FILE"]),),
                f"uv trusts $SSL_CERT_FILE ({env['SSL_CERT_FILE']}), as set")
    if env.get("UV_NATIVE_TLS", "").lower() in ("1", "true", "yes", "on"):
        return (("UV_NATIVE_TLS", "1"),), "uv trusts the system's certificate store ($UV_NATIVE_TLS)"
    cert = pip_cert(env)
    if cert is None:
        return (), "uv trusts its bundled roots (pip sets no cert)"
    return (("SSL_CERT_FILE", cert[0]),), f"uv trusts pip's CA bundle {cert[0]} (from {cert[1]}) as SSL_CERT_FILE"


def pip_trust_env(env=None) -> tuple[tuple[tuple[str, str], ...], str]:
    """pip's CA bundle passed on by name (``PIP_CERT``): a sandboxed build's env allowlist and its
    scratch home would drop the variable or the user's pip.conf that sets it."""
    cert = pip_cert(env)
    if cert is None:
        return (), ""
    return (("PIP_CERT", cert[0]),), f"pip trusts {cert[0]} (from {cert[1]})"


def installer_trust_env(installer: str, env=None) -> tuple[tuple[tuple[str, str], ...], str]:
    """The variables that give ``installer`` the CA trust of this user's pip, and a line saying which."""
    return uv_trust_env(env) if installer == "uv" else pip_trust_env(env)


def trust_files(installer: str, env=None) -> tuple[Path, ...]:
    """The CA bundle files ``installer`` is told to trust (a build's sandbox mounts them read-only:
    one in a home would be out of its sight)."""
    trust, _ = installer_trust_env(installer, env)
    files = (Path(value) for name, value in trust if name in ("SSL_CERT_FILE", "PIP_CERT"))
    return tuple(path for path in files if path.is_file())
