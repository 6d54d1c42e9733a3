"""SHA-256 and SHA-1 without loading OpenSSL.

Importing ``hashlib`` loads OpenSSL's libcrypto (3-4 ms on this project's 2-core machines), and the
launch path and every git task that names its group (a label, a marker file, a socket name) paid it.
CPython's own SHA-256 (``_sha256``; ``_sha2`` from 3.12) and SHA-1 (``_sha1``: git's object names,
a pack's trailer) give the same digests; where they are not there, hashlib's.  ``sha256(data)``
works as ``hashlib.sha256(data)`` (``update``, ``hexdigest``), ``sha1`` likewise.
"""

from __future__ import annotations

try:
    from _sha256 import sha256  # CPython 3.11
except ImportError:             # pragma: no cover - another Python
    try:
        from _sha2 import sha256  # CPython 3.12 and later
    except ImportError:
        from hashlib import sha256
try:
    from _sha1 import sha1
except ImportError:             # pragma: no cover - another Python
    from hashlib import sha1

__all__ = ["sha1", "sha256"]
