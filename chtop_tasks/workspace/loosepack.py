"""The pack of a sandbox's new objects, made from its private store's loose objects with no git
process; the host's git still checks every object in it before any lands.

An agent's commits are written loose into its private store (its ``gc.auto`` is 0), and the host's
store has everything else those commits reach (the private store's alternate).  So the objects an
import must copy are the ones the new tip reaches that are loose in the private store and neither
loose in the host's store nor reached through a commit the host's store has.
:func:`pack_of_new_objects` walks them from the tip, reads each as data (``agentfile``: no link
followed, nothing blocks, a bounded size) and checks that its content has its name, and writes the
pack git's ``unpack-objects --strict`` reads: that git, in the host's store alone, checks every
object as fsck does and that everything each links to is in the pack or in that store.

The walk gives up (None: ``git pack-objects`` is asked instead) where it cannot tell so cheaply:
the tip is not a loose object of the private store (packed by a ``git gc`` inside, say), an object
there does not hash to its name or does not parse, or the import is big (``MAX_OBJECTS``,
``MAX_BYTES``, ``MAX_VISITED``).  An object it leaves out that the host's store lacks makes the
unpack fail, and the caller falls back the same way.  SHA-1 object names only.
"""

from __future__ import annotations

import os
import zlib
from hashlib import sha1
from pathlib import Path

from .. import agentfile

PACK_TYPES = {b"commit": 1, b"tree": 2, b"blob": 3, b"tag": 4}
MAX_OBJECTS = 99              # below git's transfer.unpackLimit: more go to index-pack, as fetch does
MAX_BYTES = 8 << 20           # all the objects' contents together
MAX_VISITED = 4000            # object names looked at (a tree's entries), copied or not
GITLINK_MODE = b"160000"      # a submodule's commit: another repo's object
TREE_MODE = b"40000"


def pack_of_new_objects(store: Path, shared: Path, new: str, exclude: list[str]) -> bytes | None:
    """The pack of the objects commit ``new`` reaches that ``shared`` lacks (``b""`` when there are
    none), read from ``store``'s loose objects; ``exclude``: commits ``shared`` has, where the walk
    stops.  None: this cannot be told so (see the module's note); ask git."""
    objects = new_loose_objects(store, shared, new, set(exclude))
    if objects is None:
        return None
    return pack_bytes(objects) if objects else b""


def new_loose_objects(store: Path, shared: Path, new: str, exclude: set[str]) -> list[tuple[bytes, bytes]] | None:
    """``(type, content)`` of each object the walk from ``new`` copies, or None."""
    if len(new) != 40:
        return None
    pending, seen, found, size = [new], set(), [], 0
    while pending:
        sha = pending.pop()
        if sha in seen or sha in exclude:
            continue
        seen.add(sha)
        if len(seen) > MAX_VISITED:
            return None
        if os.path.exists(loose_path(shared, sha)):
            continue                         # the host's store has it (and, as git wrote it, all it reaches)
        obj = read_loose(store, sha)
        if obj is None:
            if sha == new:
                return None
            continue                         # the host's through the alternate, or the unpack fails
        links = linked_objects(*obj)
        if links is None:
            return None
        found.append(obj)
        size += len(obj[1])
        if len(found) > MAX_OBJECTS or size > MAX_BYTES:
            return None
        pending.extend(links)
    return found


def loose_path(store: Path, sha: str) -> str:
    return f"{store}/objects/{sha[:2]}/{sha[2:]}"


def read_loose(store: Path, sha: str) -> tuple[bytes, bytes] | None:
    """``(type, content)`` of loose object ``sha`` in ``store`` (the agent's), when it is a regular
    file that inflates within ``MAX_BYTES`` to an object of a known type whose SHA-1 is ``sha``."""
    compressed = agentfile.read_bytes(loose_path(store, sha), limit=MAX_BYTES)
    if compressed is None:
        return None
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(compressed, MAX_BYTES + 64)
    except zlib.error:
        return None
    if inflater.unconsumed_tail or not inflater.eof or sha1(data).hexdigest() != sha:
        return None
    header, nul, content = data.partition(b"\0")
    kind, _, length = header.partition(b" ")
    if not nul or kind not in PACK_TYPES or length != str(len(content)).encode():
        return None
    return kind, content


def linked_objects(kind: bytes, content: bytes) -> list[str] | None:
    """The object names ``content`` links to (a commit's tree and parents, a tree's entries but
    submodule commits, a tag's object); None when it does not parse as git writes them."""
    if kind == b"blob":
        return []
    if kind == b"tree":
        return tree_entries(content)
    names = []
    for line in content.split(b"\n"):
        if not line:
            break                        # the end of the headers
        word, _, value = line.partition(b" ")
        if word in (b"tree", b"parent", b"object"):
            if len(value) != 40:
                return None
            names.append(value.decode("ascii", "replace"))
    return names


def tree_entries(content: bytes) -> list[str] | None:
    """The names of a tree's entries' objects, submodules left out."""
    items = tree_items(content)
    return None if items is None else [sha for mode, _name, sha in items if mode != GITLINK_MODE]


def tree_items(content: bytes) -> list[tuple[bytes, bytes, str]] | None:
    """A tree's entries (``MODE NAME\0`` then 20 bytes each) as (mode, name, object name); None when
    it does not parse."""
    items, at = [], 0
    while at < len(content):
        space = content.find(b" ", at)
        nul = content.find(b"\0", space + 1)
        if space < 0 or nul < 0 or nul + 21 > len(content):
            return None
        items.append((content[at:space], content[space + 1:nul], content[nul + 1:nul + 21].hex()))
        at = nul + 21
    return items


def pack_bytes(objects: list[tuple[bytes, bytes]]) -> bytes:
    """A version-2 pack of ``objects``, each whole (no deltas), with its SHA-1 trailer."""
    parts = [b"PACK", (2).to_bytes(4, "big"), len(objects).to_bytes(4, "big")]
    for kind, content in objects:
        parts.append(entry_header(PACK_TYPES[kind], len(content)))
        parts.append(zlib.compress(content, 1))
    body = b"".join(parts)
    return body + sha1(body).digest()


def entry_header(pack_type: int, size: int) -> bytes:
    """A pack entry's type and size: 3 bits of type and 4 of size, then 7 bits of size a byte."""
    first = (pack_type << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray()
    while size:
        out.append(first | 0x80)
        first = size & 0x7F
        size >>= 7
    out.append(first)
    return bytes(out)
