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
skipped and why (an empty file, a truncated file, non-finite weights); :func:`resume_learner`
adds the architecture check (a checkpoint of other ``sac.hidden_sizes`` names the field and
both values) and restores the learner. Every failure is a :class:`CheckpointError`, which the
CLI reports as bad input (exit status 2): no checkpoint at all (``--resume`` never silently
starts afresh), none usable, or one that does not fit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

from async_rl_ros.core.learning.checkpoint import CheckpointManager
import torch

__all__ = ['CheckpointError', 'Resumed', 'load_newest', 'check_finite', 'check_compatible',
           'resume_learner', 'STRUCTURAL_KEYS']

# Learner options that shape the saved tensors: a checkpoint only fits the same values.
STRUCTURAL_KEYS = ('sac.hidden_sizes',)


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable or does not fit the learner (one-line message)."""


class Resumed(NamedTuple):
    """What :func:`load_newest` found."""

    state: dict
    path: Path
    skipped: list  # [(path, why)]: newer checkpoints that could not be used, newest first


def _first_line(exc: BaseException) -> str:
    """Return the first sentence of an error message (torch's run on for lines)."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    return text.splitlines()[0].split('. ')[0].rstrip('.')[:200]


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
    try:
        size = path.stat().st_size
    except OSError as err:
        return f'cannot be read ({err.strerror})'
    if size == 0:
        return 'empty file (0 bytes)'
    first = _first_line(exc)
    if 'zip' in first.lower() or 'central directory' in first or isinstance(exc, EOFError):
        return f'truncated or corrupt file ({size} bytes; {first})'
    return f'unreadable ({type(exc).__name__}: {first})'


def load_newest(manager: CheckpointManager, map_location: Any = 'cpu',
                check: Callable[[Mapping[str, Any]], None] | None = None) -> Resumed:
    """
    Load the newest usable checkpoint, saying which newer ones were skipped and why.

    :param manager: the checkpoint directory.
    :param map_location: device the tensors are loaded to.
    :param check: raises :class:`CheckpointError` for a state that loads but is unusable
        (e.g. :func:`check_finite`); such a checkpoint is skipped like an unreadable one.
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
        except Exception as exc:  # noqa: B902 -- any unreadable file: try the next older one
            skipped.append((candidate, describe_unreadable(candidate, exc)))
        else:
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
                     path: Path | str | None = None) -> None:
    """
    Refuse a checkpoint written with other structural settings than ``config``.

    :param state: the loaded checkpoint (its ``'config'`` is the flat learner configuration).
    :param config: the current flat configuration (``LearnerConfig.to_flat()``).
    :param keys: the settings that must be equal.
    :param prefix: put in front of the key in the message (the node name).
    :param path: the checkpoint, for the message.
    :raises CheckpointError: naming the field and both values.
    """
    saved = state.get('config') or {}
    where = f'{path}: ' if path is not None else ''
    for key in keys:
        if key not in saved or key not in config:
            continue
        old, new = _show(saved[key]), _show(config[key])
        if old != new:
            raise CheckpointError(
                f'{where}{prefix}{key} = {old} in the checkpoint but {new} in this '
                f'configuration; set {prefix}{key}={old.replace(" ", "")} to resume it, or '
                f'start afresh in another {prefix}checkpoint.directory')


def resume_learner(learner: Any) -> Resumed:
    """
    Restore a learner from the newest usable checkpoint of its directory (``--resume``).

    Unreadable, empty, truncated and non-finite checkpoints are skipped (listed in
    :attr:`Resumed.skipped`); a checkpoint of another architecture is an error.

    :param learner: has ``checkpoints`` (a :class:`CheckpointManager`), ``cfg`` (with
        ``to_flat()``) and ``load_state_dict(state)``.
    :returns: what was loaded.
    :raises CheckpointError: no checkpoint, none usable, or one that does not fit.
    """
    found = load_newest(learner.checkpoints, check=check_finite)
    check_compatible(found.state, learner.cfg.to_flat(), path=found.path)
    try:
        learner.load_state_dict(found.state)
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:
        raise CheckpointError(f'{found.path} does not fit this learner '
                              f'({type(exc).__name__}: {_first_line(exc)})') from None
    return found
