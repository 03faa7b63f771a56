# Copyright 2026 The async_rl_ros Authors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""
The checksum record of checkpoint files: any change to a checkpoint is found before unpickling.

A checkpoint file is the ``torch.save`` bytes of the state (the *body*, a zip archive) followed
by a fixed 52-byte *trailer* (all integers little-endian)::

    offset   size  field
    0        n     body: what torch.save wrote
    n        32    SHA-256 of body + the version and length fields below
    n + 32   8     length of the body in bytes (n)
    n + 40   4     trailer format version (1)
    n + 44   8     magic b'ARLCKSUM'

:func:`read_verified` reads the whole file, checks the magic, the digest (which covers the
body, the length and the version, so a changed bit anywhere in the file is caught) and the
length, and only then returns the body to unpickle. Each refusal is a :class:`DigestError`
whose message says in plain words what is wrong with the file: empty, every byte zero, cut
short or overwritten at its end, content not matching its checksum, or written by a newer
format.

Why a trailer and not a header: a zip archive is found from its end, and torch ignores bytes
after it, so a checkpoint stays a file that plain ``torch.load(path)`` (scripts, notebooks,
other tools) still reads; only the checksum check needs this module.

Checkpoints written before the trailer existed (a plain ``torch.save`` zip archive, which ends
with the zip end-of-directory record) are accepted, with a warning from the caller
(:attr:`Verified.sealed` is ``False``): a user who updates the package expects ``--resume`` of
a run in progress to keep working, and refusing those files would force a fresh start while
the checkpoint is no less trustworthy than it was the day before; the next checkpoint the run
saves carries a checksum. A damaged checkpoint with a checksum cannot pass for an old one: an
old file must end exactly with the zip end record, which no changed bit turns the trailer into
(only a cut exactly at the end of the body would, and that leaves the content intact).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
import struct
from typing import NamedTuple

__all__ = ['DigestError', 'Verified', 'MAGIC', 'TRAILER_SIZE', 'TRAILER_VERSION', 'trailer',
           'read_verified']

MAGIC = b'ARLCKSUM'
TRAILER_VERSION = 1
_FIELDS = struct.Struct('<QI')          # body length, trailer version
TRAILER_SIZE = 32 + _FIELDS.size + len(MAGIC)
_ZIP_END = b'PK\x05\x06'                # zip end-of-central-directory record, 22 bytes
_ZIP_END_SIZE = 22


class DigestError(ValueError):
    """A checkpoint file fails its checksum check; the message says why in plain words."""


class Verified(NamedTuple):
    """A checkpoint file that passed :func:`read_verified`."""

    body: bytes    # the torch.save bytes, ready to unpickle
    sealed: bool   # False: written before checkpoints carried a checksum (not verified)


def _digest(body: bytes | memoryview, fields: bytes) -> bytes:
    sha = hashlib.sha256(body)
    sha.update(fields)
    return sha.digest()


def trailer(body: bytes | memoryview) -> bytes:
    """
    Return the trailer to write after ``body``.

    :param body: the ``torch.save`` bytes of a checkpoint.
    :returns: :data:`TRAILER_SIZE` bytes.
    """
    fields = _FIELDS.pack(len(body), TRAILER_VERSION)
    return _digest(body, fields) + fields + MAGIC


def _unsealed(data: bytes) -> DigestError | None:
    """Return why a file without a trailer is refused, or ``None`` for an intact old one."""
    size = len(data)
    if size == 0:
        return DigestError('empty file (0 bytes)')
    if data.count(0) == size:
        return DigestError(f'every one of its {size} bytes is zero (its content was lost after '
                           'it was written, e.g. the machine stopped before the data reached '
                           'the disk)')
    end = data[-_ZIP_END_SIZE:]
    if end[:4] == _ZIP_END and end[-2:] == b'\x00\x00':  # an old checkpoint, complete
        return None
    return DigestError(f'truncated or damaged: it does not end with the checksum record that '
                       f'closes every complete checkpoint ({size} bytes; its end was cut off or '
                       'overwritten)')


def read_verified(path: str | Path) -> Verified:
    """
    Read a checkpoint file and check it against its checksum before anything is unpickled.

    :param path: the file.
    :returns: the body to give to ``torch.load`` and whether it was checked.
    :raises DigestError: the file is empty, zeroed, truncated, changed or of a newer format.
    :raises OSError: the file cannot be read at all.
    """
    with open(path, 'rb') as f:
        size = os.fstat(f.fileno()).st_size
        tail = b''
        if size >= TRAILER_SIZE:
            f.seek(size - TRAILER_SIZE)
            tail = f.read(TRAILER_SIZE)
        f.seek(0)
        if tail[-len(MAGIC):] != MAGIC:
            data = f.read()
            refused = _unsealed(data)
            if refused is not None:
                raise refused
            return Verified(data, False)
        body = f.read(size - TRAILER_SIZE)
    digest, fields = tail[:32], tail[32:32 + _FIELDS.size]
    if len(body) != size - TRAILER_SIZE or _digest(body, fields) != digest:
        raise DigestError('its content does not match its checksum (the file was changed or '
                          'damaged after it was written)')
    length, version = _FIELDS.unpack(fields)
    if version != TRAILER_VERSION:
        raise DigestError(f'written in checkpoint format {version} by a newer version of '
                          f'async_rl_ros; this one reads format {TRAILER_VERSION}')
    if length != len(body):  # cannot happen with a matching digest unless written wrongly
        raise DigestError(f'its checksum record counts {length} bytes of content but the file '
                          f'holds {len(body)}')
    return Verified(body, True)
