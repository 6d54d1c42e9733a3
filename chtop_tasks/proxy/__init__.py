"""The egress proxy: one per grouping dir, filtering by domain allowlist.

Public interface (see the README's "Egress proxy"):
``ensure_proxy``, ``proxy_status``, ``stop_proxy``, ``ProxyEndpoint``.
"""

from .control import ProxyEndpoint, ensure_proxy, proxy_status, stop_proxy

__all__ = ["ProxyEndpoint", "ensure_proxy", "proxy_status", "stop_proxy"]
