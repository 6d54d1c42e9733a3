"""An object of the host's store read from its packs as data, with no git process.

merge-up diffs each repo's landing tip against its integration tip (``treediff``).  A fresh
clone's objects, the integration tip's among them, are in a pack, so before this module each
such diff was a ``git diff --name-only`` at the end of the dry run, about 5 ms apiece on the
2-core box.  Here an object is found in a version-2 pack index (``objects/pack/*.idx``: a fan-out
table, the sorted names, their offsets) and read from its pack: a whole object, or one stored as a
delta (against an earlier entry of the pack, or against an object named by its id) applied to its
base.  The result must hash to the name asked for.

Every file is read as ``agentfile`` reads (no link followed, nothing that blocks, a bounded size),
and anything this does not read plainly -- another index version, a chain of deltas longer than
``MAX_CHAIN``, an object over ``MAX_BYTES``, a pack gone or changed meanwhile, a store that
holds it only through another store (``objects/info/alternates``) -- is None: the caller asks git.
SHA-1 object names only.
"""

from __future__ import annotations

import os
import stat
import zlib
from hashlib import sha1
from pathlib import Path

from .. import agentfile
from .loosepack import read_loose

IDX_MAGIC = b"\377tOc"
IDX_VERSION = 2
FANOUT_END = 8 + 256 * 4        # magic and version, then 256 big-endian counts
MAX_INDEX_BYTES = 64 << 20       # a bigger index: ask git
MAX_BYTES = 8 << 20              # an object's content, and a delta's
MAX_CHAIN = 64                   # deltas followed to a whole object (git's default depth is 50)
OBJECT_TYPES = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}
OFS_DELTA, REF_DELTA = 6, 7
READ_AHEAD = 4096                # bytes read past an entry's size, for its header and deflate's own

_indexes: dict[str, bytes] = {}  # an index's path -> its bytes (a pack and its index never change)


def read_object(store: Path, sha: str) -> tuple[bytes, bytes] | None:
    """``(type, content)`` of object ``sha`` of ``store``: loose, else from a pack; or None."""
    return read_loose(store, sha) or read_packed(store, sha)


def read_packed(store: Path, sha: str, chain_left: int = MAX_CHAIN) -> tuple[bytes, bytes] | None:
    """``(type, content)`` of object ``sha`` from one of ``store``'s packs, or None.  ``chain_left``:
    how many more deltas may be followed to reach it."""
    try:
        name = bytes.fromhex(sha)
    except ValueError:
        return None
    if len(name) != 20:
        return None
    for idx in pack_indexes(store):
        index = index_bytes(idx)
        offset = None if index is None else offset_in_index(index, name)
        if offset is not None:
            found = read_from_pack(idx[:-len(".idx")] + ".pack", offset, store, chain_left)
            return found if found is not None and object_id(*found) == sha else None
    return None


def pack_indexes(store: Path) -> list[str]:
    try:
        with os.scandir(f"{store}/objects/pack") as entries:
            return sorted(entry.path for entry in entries if entry.name.endswith(".idx"))
    except OSError:
        return []


def index_bytes(path: str) -> bytes | None:
    if path not in _indexes:
        data = agentfile.read_bytes(path, limit=MAX_INDEX_BYTES)
        if data is None or data[:8] != IDX_MAGIC + IDX_VERSION.to_bytes(4, "big") or len(data) < FANOUT_END:
            return None
        _indexes[path] = data
    return _indexes[path]


def offset_in_index(index: bytes, name: bytes) -> int | None:
    """The pack offset of object ``name`` (20 bytes) in a version-2 index, or None."""
    count = int.from_bytes(index[FANOUT_END - 4:FANOUT_END], "big")
    names_at = FANOUT_END
    offsets_at = names_at + count * 24           # past the names (20 bytes) and their CRCs (4)
    large_at = offsets_at + count * 4
    if len(index) < large_at + 40:               # the pack's and the index's checksums end it
        return None
    first = name[0]
    low = int.from_bytes(index[8 + (first - 1) * 4:8 + first * 4], "big") if first else 0
    high = int.from_bytes(index[8 + first * 4:12 + first * 4], "big")
    while low < high:
        mid = (low + high) // 2
        here = index[names_at + mid * 20:names_at + mid * 20 + 20]
        if here == name:
            offset = int.from_bytes(index[offsets_at + mid * 4:offsets_at + mid * 4 + 4], "big")
            if offset & 0x80000000:
                at = large_at + (offset & 0x7FFFFFFF) * 8
                if at + 8 > len(index) - 40:
                    return None
                offset = int.from_bytes(index[at:at + 8], "big")
            return offset
        if here < name:
            low = mid + 1
        else:
            high = mid
    return None


def read_from_pack(pack: str, offset: int, store: Path, chain_left: int) -> tuple[bytes, bytes] | None:
    try:
        fd = os.open(pack, agentfile.OPEN_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return entry_at(fd, offset, store, chain_left)
    except (OSError, zlib.error, ValueError, IndexError):       # a short or garbled entry
        return None
    finally:
        os.close(fd)


def entry_at(fd: int, offset: int, store: Path, chain_left: int) -> tuple[bytes, bytes] | None:
    """The object at ``offset`` of the open pack ``fd``, its deltas applied."""
    if chain_left < 0:
        return None
    head = os.pread(fd, 32, offset)
    kind, size, at = entry_header(head)
    if size > MAX_BYTES:
        return None
    if kind in OBJECT_TYPES:
        data = inflated(fd, offset + at, size)
        return None if data is None else (OBJECT_TYPES[kind], data)
    if kind == OFS_DELTA:
        back, used = delta_base_distance(head[at:])
        base = entry_at(fd, offset - back, store, chain_left - 1) if 0 < back <= offset else None
        at += used
    elif kind == REF_DELTA:
        base_name = head[at:at + 20].hex()
        base = read_packed(store, base_name, chain_left - 1) if chain_left > 0 else None
        at += 20
    else:
        return None
    delta = inflated(fd, offset + at, size) if base is not None else None
    content = None if delta is None else applied(base[1], delta)
    return None if content is None else (base[0], content)


def entry_header(head: bytes) -> tuple[int, int, int]:
    """(type, size, header length) of a pack entry: 3 bits of type, 4 of size, then 7 a byte."""
    byte = head[0]
    kind, size, shift, at = (byte >> 4) & 7, byte & 0x0F, 4, 1
    while byte & 0x80:
        if at >= len(head):
            raise ValueError("pack entry header too long")
        byte = head[at]
        size |= (byte & 0x7F) << shift
        shift += 7
        at += 1
    return kind, size, at


def delta_base_distance(data: bytes) -> tuple[int, int]:
    """An offset delta's distance back to its base (git's own varint: each further byte adds one
    before the shift), and the bytes it took."""
    byte = data[0]
    distance, at = byte & 0x7F, 1
    while byte & 0x80:
        if at >= len(data):
            raise ValueError("delta offset too long")
        byte = data[at]
        distance = ((distance + 1) << 7) | (byte & 0x7F)
        at += 1
    return distance, at


def inflated(fd: int, at: int, size: int) -> bytes | None:
    """``size`` bytes deflated at ``at`` of ``fd``, or None when the stream says otherwise."""
    inflater = zlib.decompressobj()
    out, got, want = [], 0, size + READ_AHEAD
    while not inflater.eof:
        chunk = os.pread(fd, want, at)
        if not chunk:
            return None
        at += len(chunk)
        out.append(inflater.decompress(chunk, size + 1 - got))      # (never 0: that is "no limit")
        got += len(out[-1])
        if inflater.unconsumed_tail or got > size:
            return None                 # more than the header said
    return b"".join(out) if got == size else None


def applied(base: bytes, delta: bytes) -> bytes | None:
    """``base`` with git's delta applied: the sizes, then copies from the base and inserted bytes."""
    base_size, at = delta_size(delta, 0)
    result_size, at = delta_size(delta, at)
    if base_size != len(base) or result_size > MAX_BYTES:
        return None
    out = bytearray()
    while at < len(delta):
        op = delta[at]
        at += 1
        if op & 0x80:
            copy_from = copy_size = 0
            for bit in range(4):
                if op & (1 << bit):
                    copy_from |= delta[at] << (8 * bit)
                    at += 1
            for bit in range(3):
                if op & (0x10 << bit):
                    copy_size |= delta[at] << (8 * bit)
                    at += 1
            copy_size = copy_size or 0x10000
            if copy_from + copy_size > len(base):
                return None
            out += base[copy_from:copy_from + copy_size]
        elif op:
            if at + op > len(delta):
                return None
            out += delta[at:at + op]
            at += op
        else:
            return None                 # reserved
    return bytes(out) if len(out) == result_size else None


def delta_size(delta: bytes, at: int) -> tuple[int, int]:
    size, shift = 0, 0
    while True:
        byte = delta[at]
        at += 1
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return size, at


def object_id(kind: bytes, content: bytes) -> str:
    return sha1(kind + b" " + str(len(content)).encode() + b"\0" + content).hexdigest()
