"""SHA-256 without loading OpenSSL.

Importing ``hashlib`` loads OpenSSL's libcrypto (3-4 ms on this project's 2-core machines), and the
launch path and every git task that names its group (a label, a marker file, a socket name) paid it.
CPython's own SHA-256 (``_sha256``; ``_sha2`` from 3.12) gives the same digests; where neither is
there, hashlib's.  ``sha256(data)`` works as ``hashlib.sha256(data)`` (``update``, ``hexdigest``).
"""

from __future__ import annotations

try:
    from _sha256 import sha256  # CPython 3.11
except ImportError:             # pragma: no cover - another Python
    try:
        from _sha2 import sha256  # CPython 3.12 and later
    except ImportError:
        from hashlib import sha256

__all__ = ["sha256"]
