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
Resuming a learner from its checkpoints, with one clear line for every way it can fail.

:func:`load_newest` loads the newest usable checkpoint of a
:class:`~async_rl_ros.core.learning.checkpoint.CheckpointManager` and names the newer ones it
skipped and why, in words a user understands: an empty, zeroed or truncated file, a file whose
content does not match its checksum (changed or damaged after it was written: the check runs
before anything is unpickled, see :mod:`~async_rl_ros.core.learning.ckpt_digest`), non-finite
weights, or a state that loads but cannot be restored. :func:`resume_learner` adds the
architecture check (a checkpoint of other ``sac.hidden_sizes`` names the field and both
values) and restores the learner with :func:`restore_learner`: all of the state or none of it
-- a restore that fails part-way puts the learner back as it was, and the next older checkpoint
is tried. Every failure is a :class:`CheckpointError`, which the CLI reports as bad input
(exit status 2) in one line: no checkpoint at all (``--resume`` never silently starts afresh),
none usable, or one that does not fit. After a resume, :func:`replay_note` says what the
replay buffer holds: a checkpoint keeps it only with ``checkpoint.save_replay_buffer``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

from async_rl_ros.core.errors import first_line
from async_rl_ros.core.learning.checkpoint import CheckpointManager
from async_rl_ros.core.learning.ckpt_digest import DigestError
import torch

__all__ = ['CheckpointError', 'RestoreFailed', 'Resumed', 'load_newest', 'check_finite',
           'check_compatible', 'restore_learner', 'resume_learner', 'replay_note',
           'describe_unreadable', 'STRUCTURAL_KEYS']

# Learner options that shape the saved tensors: a checkpoint only fits the same values.
STRUCTURAL_KEYS = ('sac.hidden_sizes',)


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable or does not fit the learner (one-line message)."""


class RestoreFailed(CheckpointError):
    """A checkpoint loaded but could not be restored; the learner is as it was (try older)."""


class Resumed(NamedTuple):
    """What :func:`load_newest` found."""

    state: dict
    path: Path
    skipped: list  # [(path, why)]: newer checkpoints that could not be used, newest first


def _show(value: Any) -> str:
    """Format a config value as a user writes it: ``[32, 32]`` rather than ``[32.0, 32.0]``."""
    if isinstance(value, (list, tuple)):
        return '[' + ', '.join(_show(v) for v in value) + ']'
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def describe_unreadable(path: Path, exc: BaseException) -> str:
    """
    Say in a few words why a checkpoint file does not load.

    :param path: the file.
    :param exc: what loading it raised.
    """
    if isinstance(exc, DigestError):  # its message is written for the user
        return str(exc)
    try:
        size = path.stat().st_size
    except OSError as err:
        return f'cannot be read ({err.strerror})'
    if size == 0:
        return 'empty file (0 bytes)'
    first = first_line(exc)
    if 'zip' in first.lower() or 'central directory' in first or isinstance(exc, EOFError):
        return f'truncated or corrupt file ({size} bytes; {first})'
    return f'unreadable ({type(exc).__name__}: {first})'


def load_newest(manager: CheckpointManager, map_location: Any = 'cpu',
                check: Callable[[Mapping[str, Any]], None] | None = None,
                use: Callable[[Path, Mapping[str, Any]], None] | None = None) -> Resumed:
    """
    Load the newest usable checkpoint, saying which newer ones were skipped and why.

    :param manager: the checkpoint directory.
    :param map_location: device the tensors are loaded to.
    :param check: raises :class:`CheckpointError` for a state that loads but is unusable
        (e.g. :func:`check_finite`); such a checkpoint is skipped like an unreadable one.
    :param use: applies a checked state (e.g. restores a learner from it); it raises
        :class:`RestoreFailed` to have the checkpoint skipped (having undone what it changed),
        any other :class:`CheckpointError` to stop here (e.g. another architecture).
    :returns: the state, its path and the skipped ``(path, why)`` pairs.
    :raises CheckpointError: when there is no checkpoint or none is usable.
    """
    paths = manager.list()
    if not paths:
        raise CheckpointError(f'no checkpoint to resume from in {manager.directory} '
                              '(no ckpt_*.pt); run without --resume to start afresh')
    skipped: list[tuple[Path, str]] = []
    for candidate in reversed(paths):
        try:
            state = manager.load(candidate, map_location=map_location)
            if check is not None:
                check(state)
        except CheckpointError as exc:
            skipped.append((candidate, str(exc)))
            continue
        except Exception as exc:  # noqa: B902 -- any unreadable file: try the next older one
            skipped.append((candidate, describe_unreadable(candidate, exc)))
            continue
        if use is not None:
            try:
                use(candidate, state)
            except RestoreFailed as exc:
                skipped.append((candidate, str(exc)))
                continue
        return Resumed(state, candidate, skipped)
    whys = '; '.join(f'{path.name}: {why}' for path, why in skipped)
    raise CheckpointError(f'no usable checkpoint in {manager.directory} ({whys})')


def check_finite(state: Mapping[str, Any]) -> None:
    """
    Refuse a state whose network weights hold NaN or Inf.

    :param state: a learner checkpoint (its ``'sac'`` entry is checked).
    :raises CheckpointError: naming the first non-finite tensor.
    """
    def walk(obj: Any, where: str) -> None:
        if isinstance(obj, torch.Tensor):
            if obj.is_floating_point() and not bool(torch.isfinite(obj).all()):
                raise CheckpointError(f'non-finite weights in {where}')
        elif isinstance(obj, Mapping):
            for key, value in obj.items():
                walk(value, f'{where}.{key}')

    walk(state.get('sac', {}), 'sac')


def check_compatible(state: Mapping[str, Any], config: Mapping[str, Any],
                     keys: tuple[str, ...] = STRUCTURAL_KEYS, prefix: str = 'learner.',
                     path: Path | str | None = None, task: str | None = None) -> None:
    """
    Refuse a checkpoint written for another task or with other structural settings.

    :param state: the loaded checkpoint (its ``'config'`` is the flat learner configuration).
    :param config: the current flat configuration (``LearnerConfig.to_flat()``).
    :param keys: the settings that must be equal.
    :param prefix: put in front of the key in the message (the node name).
    :param path: the checkpoint, for the message.
    :param task: the task this learner learns (``None``: not checked, nor in a checkpoint
        that names none).
    :raises CheckpointError: naming the field and both values.
    """
    saved = state.get('config') or {}
    where = f'{path}: ' if path is not None else ''
    if state.get('task') is not None and task is not None and state['task'] != task:
        raise CheckpointError(
            f'{where}env_worker.task.name = {state["task"]} in the checkpoint but {task} in '
            f'this configuration; set env_worker.task.name={state["task"]} (--task '
            f'{state["task"]}) to resume it, or start afresh in another '
            f'{prefix}checkpoint.directory')
    for key in keys:
        if key not in saved or key not in config:
            continue
        old, new = _show(saved[key]), _show(config[key])
        if old != new:
            raise CheckpointError(
                f'{where}{prefix}{key} = {old} in the checkpoint but {new} in this '
                f'configuration; set {prefix}{key}={old.replace(" ", "")} to resume it, or '
                f'start afresh in another {prefix}checkpoint.directory')


def restore_learner(learner: Any, state: Mapping[str, Any], path: Path | str = '') -> None:
    """
    Restore ``learner`` from a loaded checkpoint: all of it, or leave the learner as it was.

    The learner's own state (and its replay buffer, when the checkpoint holds one) is copied
    first; a restore that fails part-way (a key missing, a tensor of another shape, a random
    state that does not fit ...) is undone from that copy.

    :param learner: has ``state_dict()`` and ``load_state_dict(state)`` (and maybe ``replay``).
    :param state: the loaded checkpoint.
    :param path: the checkpoint, for the message.
    :raises RestoreFailed: the restore failed and was undone.
    :raises CheckpointError: the restore failed and could not be undone either.
    """
    before = copy.deepcopy(learner.state_dict())
    replay = getattr(learner, 'replay', None)
    replay_before = (replay.state_dict() if replay is not None
                     and state.get('replay_buffer') is not None else None)
    try:
        learner.load_state_dict(state)
    except Exception as exc:  # noqa: B902 -- whatever fails, put the learner back
        why = f'{type(exc).__name__}: {first_line(exc)}'
        try:
            learner.load_state_dict(before)
            if replay_before is not None:
                replay.load_state_dict(replay_before)
        except Exception as undo:  # noqa: B902
            raise CheckpointError(
                f'{Path(path).name}: restoring it failed ({why}) and so did putting the learner '
                f'back ({type(undo).__name__}: {first_line(undo)}); nothing was resumed'
            ) from None
        raise RestoreFailed(f'it loads but cannot be restored into this learner ({why})'
                            ) from None


def resume_learner(learner: Any) -> Resumed:
    """
    Restore a learner from the newest usable checkpoint of its directory (``--resume``).

    Unreadable, empty, zeroed, truncated or damaged (checksum mismatch), non-finite and
    unrestorable checkpoints are skipped (listed in :attr:`Resumed.skipped`) and the next
    older one is tried; a checkpoint of another architecture is an error.

    :param learner: has ``checkpoints`` (a :class:`CheckpointManager`), ``cfg`` (with
        ``to_flat()``), ``state_dict()`` and ``load_state_dict(state)``.
    :returns: what was loaded.
    :raises CheckpointError: no checkpoint, none usable, or one that does not fit.
    """
    config = learner.cfg.to_flat()

    def use(path: Path, state: Mapping[str, Any]) -> None:
        try:
            check_compatible(state, config, path=path, task=getattr(learner, 'task', None))
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: B902 -- a malformed 'config' entry: skip the file
            raise RestoreFailed(f'its saved configuration cannot be read '
                                f'({type(exc).__name__}: {first_line(exc)})') from None
        restore_learner(learner, state, path)

    return load_newest(learner.checkpoints, check=check_finite, use=use)


def replay_note(learner: Any) -> str:
    """
    Return the line a driver prints after a resume: what the learner's replay buffer holds.

    Without ``checkpoint.save_replay_buffer`` a checkpoint holds the networks, not the data:
    the resumed learner refills an empty buffer and waits until it holds ``learning_starts``
    transitions (or one batch; hindsight copies count) before it updates again, which a user
    would otherwise only see as a dip in the curve.

    :param learner: has ``replay`` and ``start_size`` (a resumed :class:`Learner`).
    """
    held = len(learner.replay)
    if held:
        return f'replay buffer restored: {held} transitions'
    return ('replay buffer empty: the checkpoint holds none (learner.checkpoint.'
            f'save_replay_buffer keeps it); updates resume once it holds '
            f'{learner.start_size} transitions again')
