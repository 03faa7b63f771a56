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
Atomic learner checkpoints: a crash at any instant leaves only complete checkpoints.

:meth:`CheckpointManager.save` writes ``torch.save(state)`` followed by a checksum record
(SHA-256 of the content, see :mod:`~async_rl_ros.core.learning.ckpt_digest`) to a hidden
temporary file in the checkpoint directory (``.ckpt_<step>.pt.<pid>.<token>.tmp``), flushes
and fsyncs it, renames it over the final name ``ckpt_<step, 9 digits>.pt`` with
:func:`os.replace` (atomic on POSIX within one file system), fsyncs the directory so the rename
itself is durable, and prunes to the newest ``keep_last``. A writer killed mid-save leaves
only a temporary file, which :meth:`~CheckpointManager.list` ignores and the next save deletes
(once its writer's process is gone).

What a learner checkpoint holds (a flat ``dict``; the learner builds it):

* ``state_dict()`` of the networks (actor, critics, target critics) and of the optimizers,
  the temperature ``log_alpha``, the observation-normalizer statistics, the counters;
* ``rng``: :func:`capture_rng_state` (python ``random``, numpy, torch, CUDA; see
  :mod:`~async_rl_ros.core.learning.rng_state`);
* ``config``: the configuration as a flat dict (``Section.to_flat()``);
* ``replay_buffer`` (optional, ``save(..., replay_buffer=buf)``): the buffer's
  ``state_dict()`` packed by :func:`pack_replay_buffer` -- its numpy arrays compressed with
  :func:`numpy.savez_compressed` into one ``bytes`` value, the rest (cursors, generator state,
  config) kept as plain values -- inside the same file. One file keeps the buffer consistent
  with the counters and weights and is atomic by the same procedure; the cost is that each of
  the ``keep_last`` checkpoints carries its own copy. Restore with
  ``buf.load_state_dict(unpack_replay_buffer(state['replay_buffer']))``.

Resuming (``--resume``) goes through :mod:`async_rl_ros.core.learning.resume`, which says in
one line what is wrong with a missing, corrupt or incompatible checkpoint.

Loading first checks the file against its checksum (a file changed or damaged after it was
written -- one flipped bit, zeroed or cut short -- is refused with a plain-words reason before
anything is unpickled), then uses ``torch.load(weights_only=True)`` with numpy arrays allowed,
so a checkpoint can hold tensors, numpy arrays, bytes and Python primitives (no arbitrary
classes), and loading one cannot run code. Checkpoints from before the checksum are loaded
with a warning (why: :mod:`~async_rl_ros.core.learning.ckpt_digest`).
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
import re
import secrets
import threading
import time
from typing import Any, Mapping, Protocol

from async_rl_ros.core.config import CheckpointConfig
from async_rl_ros.core.learning.ckpt_digest import DigestError, read_verified, trailer
from async_rl_ros.core.learning.rng_state import capture_rng_state, restore_rng_state
import numpy as np
import torch

__all__ = [
    'CheckpointConfig',
    'CheckpointManager',
    'ReplayStateful',
    'capture_rng_state',
    'restore_rng_state',
    'pack_replay_buffer',
    'unpack_replay_buffer',
]

_LOG = logging.getLogger(__name__)
RUN_SUBDIR = 'checkpoints'  # a run folder's checkpoint folder (when none is configured)
_NAME = re.compile(r'^ckpt_(\d+)\.pt$')
_TMP = re.compile(r'^\.ckpt_\d+\.pt\.(\d+)\.[0-9a-f]+\.tmp$')
_TMP_GLOB = '.ckpt_*.tmp'
FORMAT_VERSION = 1


class ReplayStateful(Protocol):
    """A replay buffer that can be checkpointed."""

    def state_dict(self) -> Mapping[str, Any]:
        """
        Return the buffer's contents and cursors.

        :returns: nested dicts/lists of numpy arrays, numbers, strings (no object arrays).
        """


# ====================================================================== replay buffer
_ARRAY_REF = '__packed_array__'
_PACK_FORMAT = 'npz/1'


def pack_replay_buffer(buffer: ReplayStateful) -> dict[str, Any]:
    """
    Pack a replay buffer's ``state_dict()`` with its arrays compressed.

    The state may nest dicts, lists and tuples. Every numpy array (or tensor) in it goes into
    one :func:`numpy.savez_compressed` archive; the rest -- numbers (numpy scalars become
    Python numbers), strings, bytes, ``None`` -- stays as it is, with a reference in place of
    each array.

    :param buffer: any object with ``state_dict()``.
    :returns: ``{'format', 'tree', 'arrays'}`` for :func:`unpack_replay_buffer`.
    :raises TypeError: for object arrays or values of other types.
    """
    arrays: dict[str, np.ndarray] = {}

    def walk(obj: Any, where: str) -> Any:
        if isinstance(obj, torch.Tensor):
            obj = obj.detach().cpu().numpy()
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise TypeError(f'replay buffer field {where} is an object array')
            key = f'a{len(arrays)}'
            arrays[key] = obj
            return {_ARRAY_REF: key}
        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, Mapping):
            return {k: walk(v, f'{where}.{k}') for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            items = [walk(v, f'{where}[{i}]') for i, v in enumerate(obj)]
            return items if isinstance(obj, list) else tuple(items)
        if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
            return obj
        raise TypeError(f'replay buffer field {where} of type {type(obj).__name__} cannot be '
                        'stored in a checkpoint')

    tree = walk(buffer.state_dict(), 'state_dict()')
    out = io.BytesIO()
    np.savez_compressed(out, **arrays)
    return {'format': _PACK_FORMAT, 'tree': tree, 'arrays': out.getvalue()}


def unpack_replay_buffer(packed: Mapping[str, Any]) -> dict[str, Any]:
    """
    Rebuild the state dict that :func:`pack_replay_buffer` packed.

    :param packed: the packed value (as loaded from a checkpoint).
    :returns: the buffer's state dict, for its ``load_state_dict``.
    """
    if packed.get('format') != _PACK_FORMAT:
        raise ValueError(f'unknown replay buffer format {packed.get("format")!r}')
    with np.load(io.BytesIO(packed['arrays']), allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}

    def build(obj: Any) -> Any:
        if isinstance(obj, dict):
            if set(obj) == {_ARRAY_REF}:
                return arrays[obj[_ARRAY_REF]]
            return {k: build(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [build(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(build(v) for v in obj)
        return obj

    return build(packed['tree'])


# ====================================================================== manager
def _numpy_safe_globals() -> list[Any]:
    """Return what ``weights_only`` loading must allow so that numpy arrays load."""
    core = getattr(np, '_core', None)
    if core is None:  # numpy < 2
        core = np.core
    allowed: list[Any] = [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray,
                          np.dtype]
    dtypes = getattr(np, 'dtypes', None)
    if dtypes is not None:
        allowed.extend(getattr(dtypes, name) for name in dir(dtypes) if name.endswith('DType'))
    return allowed


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _fsync_directory(directory: Path) -> None:
    flags = os.O_RDONLY | getattr(os, 'O_DIRECTORY', 0)
    try:
        fd = os.open(directory, flags)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class CheckpointManager:
    """
    Write, list, prune and load the checkpoints of one learner in one directory.

    One process writes at a time (the learner); other processes may list and load at any
    moment and only ever see complete files.

    :param directory: where checkpoints live; created if missing.
    :param keep_last: how many of the newest checkpoints a save keeps.
    """

    def __init__(self, directory: str | Path, keep_last: int = 3):
        if keep_last < 1:
            raise ValueError(f'keep_last = {keep_last} must be >= 1')
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep_last = int(keep_last)
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: CheckpointConfig, run_dir: str | Path) -> 'CheckpointManager':
        """
        Build a manager from its configuration section.

        :param cfg: the ``checkpoint`` section.
        :param run_dir: the run's folder (``learner.log_dir`` once the run folder is open):
            checkpoints go to its ``checkpoints/`` unless ``cfg.directory`` names a folder.
        :returns: the manager.
        """
        return cls(cfg.directory or Path(run_dir) / RUN_SUBDIR, keep_last=cfg.keep_last)

    def path_for(self, step: int) -> Path:
        """
        Return the final path of the checkpoint of ``step``.

        :param step: learner update count.
        :returns: ``directory / 'ckpt_000001234.pt'``.
        """
        if step < 0:
            raise ValueError(f'step = {step} must be >= 0')
        return self.directory / f'ckpt_{int(step):09d}.pt'

    def save(self, state: Mapping[str, Any], step: int,
             replay_buffer: ReplayStateful | None = None) -> Path:
        """
        Write a checkpoint atomically and prune to the newest ``keep_last``.

        :param state: what to save (tensors, numpy arrays, bytes, Python primitives).
        :param step: learner update count; it names the file.
        :param replay_buffer: optional buffer stored compressed under ``'replay_buffer'``.
        :returns: the final path.
        """
        final = self.path_for(step)
        payload = dict(state)
        if replay_buffer is not None:
            payload['replay_buffer'] = pack_replay_buffer(replay_buffer)
        payload['checkpoint'] = {'step': int(step), 'time': time.time(),
                                 'format': FORMAT_VERSION}
        with self._lock:
            self._remove_stale_temporaries()
            tmp = self.directory / (f'.{final.name}.{os.getpid()}.'
                                    f'{secrets.token_hex(4)}.tmp')
            body = io.BytesIO()
            torch.save(payload, body)
            try:
                with open(tmp, 'wb') as f:
                    f.write(body.getbuffer())
                    f.write(trailer(body.getbuffer()))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, final)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            _fsync_directory(self.directory)
            self._prune(keep=final)
        _LOG.info('checkpoint saved: %s (%.1f MB)', final, final.stat().st_size / 1e6)
        return final

    def list(self) -> list[Path]:  # noqa: A003 - the name the learner API uses
        """
        List the complete checkpoints, oldest first (by step).

        :returns: paths; temporary files are never listed.
        """
        found = []
        for path in self.directory.iterdir():
            match = _NAME.match(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return [path for _, path in sorted(found)]

    def latest(self) -> Path | None:
        """
        Return the newest checkpoint.

        :returns: its path, or ``None`` when there is none.
        """
        paths = self.list()
        return paths[-1] if paths else None

    def load(self, path: str | Path | None = None, map_location: Any = 'cpu',
             weights_only: bool = True) -> dict[str, Any]:
        """
        Load a checkpoint: the given one, or the newest one that reads.

        The file is checked against its checksum before it is unpickled. Without ``path``,
        unreadable checkpoints (the atomic rename prevents torn writes, not a disk that changes
        or loses data later) are skipped with a warning and the next older one is tried.

        :param path: a specific checkpoint; errors are then raised, not skipped
            (:class:`~async_rl_ros.core.learning.ckpt_digest.DigestError` for a file that fails
            its checksum check, with the reason in plain words).
        :param map_location: device the tensors are loaded to.
        :param weights_only: refuse arbitrary pickled classes (numpy arrays are allowed).
        :returns: the saved dict (``'checkpoint'`` holds the step, time and format).
        :raises FileNotFoundError: when there is no readable checkpoint.
        """
        if path is not None:
            return self._load(Path(path), map_location, weights_only)
        last_error: BaseException | None = None
        for candidate in reversed(self.list()):
            try:
                return self._load(candidate, map_location, weights_only)
            except Exception as exc:  # any unreadable file: try the next older one
                why = str(exc).splitlines()[0] if str(exc) else ''
                if not isinstance(exc, DigestError):
                    why = f'{type(exc).__name__}: {why}'
                _LOG.warning('checkpoint %s is unreadable, skipped: %s', candidate, why)
                last_error = exc
        raise FileNotFoundError(f'no readable checkpoint in {self.directory}') from last_error

    @staticmethod
    def _load(path: Path, map_location: Any, weights_only: bool) -> dict[str, Any]:
        verified = read_verified(path)  # DigestError before anything is unpickled
        if not verified.sealed:
            _LOG.warning('%s was written before checkpoints carried a checksum: it is loaded, '
                         'but damage to it cannot be detected', path.name)
        body = io.BytesIO(verified.body)
        if weights_only:
            with torch.serialization.safe_globals(_numpy_safe_globals()):
                state = torch.load(body, map_location=map_location, weights_only=True)
        else:
            state = torch.load(body, map_location=map_location, weights_only=False)
        if not isinstance(state, dict):
            raise TypeError(f'{path} holds a {type(state).__name__}, not a dict')
        return state

    def _remove_stale_temporaries(self) -> None:
        """Delete temporary files whose writer is gone (or is this process)."""
        for tmp in self.directory.glob(_TMP_GLOB):
            match = _TMP.match(tmp.name)
            pid = int(match.group(1)) if match else -1
            if pid != os.getpid() and _pid_alive(pid):
                continue
            try:
                tmp.unlink()
                _LOG.info('removed temporary file of an interrupted save: %s', tmp)
            except FileNotFoundError:
                pass

    def _prune(self, keep: Path) -> None:
        paths = self.list()
        for path in paths[:max(0, len(paths) - self.keep_last)]:
            if path != keep:
                path.unlink(missing_ok=True)
