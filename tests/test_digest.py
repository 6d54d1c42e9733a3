"""chtop_tasks.digest: SHA-256 without OpenSSL's import."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from chtop_tasks.digest import sha1, sha256


def test_digest_sha256_and_sha1_are_hashlibs_and_load_no_openssl():
    """chtop_tasks.digest's SHA-256 and SHA-1 give hashlib's digests (names and markers stay as they
    were; git's object names) without importing hashlib, which loads OpenSSL."""
    for data in (b"", b"/some/group dir", bytes(range(256)) * 40):
        streamed = sha256()
        streamed.update(data[:7])
        streamed.update(data[7:])
        assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest() == streamed.hexdigest()
        assert sha1(data).hexdigest() == hashlib.sha1(data).hexdigest()
    loaded = subprocess.run([sys.executable, "-c", "import sys, chtop_tasks.digest, chtop_tasks.places; "
                             "print('hashlib' in sys.modules, '_hashlib' in sys.modules)"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert loaded == ["False", "False"]
