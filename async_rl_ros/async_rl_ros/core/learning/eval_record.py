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
The evaluator's record in a checkpoint, so that the best snapshots survive ``--resume``.

A run exports the best of its evaluated snapshots (see
:func:`~async_rl_ros.core.learning.artifacts.select_export`). Those snapshots live in the
training loop. Without them in the checkpoint, a resumed run would choose among the snapshots
scored after the resume only, and a better policy scored before it would be lost.

Each checkpoint therefore carries the ``learner.export_candidates`` best-scored snapshots
(``checkpoint['evaluations']``), oldest first, each with its weights, normalizer statistics,
version, env steps and episode statistics. That is all a choice ever uses: the ``count`` best
of a whole run are among the ``count`` best before the resume and the snapshots after it. The
entries are plain values, lists, numpy arrays and tensors, which
``torch.load(weights_only=True)`` reads; per-episode figures are lists, because an empty numpy
array pickles as a call of ``bytes()``, which it refuses.

:func:`unpack_evaluations` checks every entry against the learner it is restored into (the
actor's tensor names and shapes, the observation width, finite values, counts within range)
before it keeps anything; a record that does not fit raises :class:`RecordError` naming the
first field that is wrong, and the caller drops the whole record.
"""

from __future__ import annotations

from collections import Counter
import math
from typing import Any, Mapping, Sequence

from async_rl_ros.core.learning.evaluation import EpisodeStats, Evaluation
from async_rl_ros.core.records import PolicyState, PolicyStateError
from async_rl_ros.core.tasks import RankMetric
import numpy as np
import torch

__all__ = ['EVALUATIONS_KEY', 'MAX_ENTRIES', 'RecordError', 'pack_evaluations',
           'unpack_evaluations']

#: the checkpoint entry that holds the record
EVALUATIONS_KEY = 'evaluations'
#: most entries a record may hold (the upper bound of ``learner.export_candidates``)
MAX_ENTRIES = 100
#: most episodes one evaluation may count
MAX_EPISODES = 1_000_000

_ENTRY_KEYS = {'version', 'env_steps', 'actor', 'obs_mean', 'obs_std', 'obs_clip', 'stats'}
_STATS_KEYS = {'episodes', 'steps', 'successes', 'returns', 'final_values', 'safety',
               'seconds', 'rank'}
_RANK_KEYS = {'key', 'label', 'unit', 'lower_is_better'}


class RecordError(ValueError):
    """An evaluation record that does not fit this learner (names the field)."""


def pack_evaluations(evaluations: Sequence[Evaluation]) -> list[dict[str, Any]]:
    """Return ``evaluations`` as checkpoint entries (plain values, arrays and tensors)."""
    packed = []
    for scored in evaluations:
        state, stats = scored.state, scored.stats
        packed.append({
            'version': int(state.version), 'env_steps': int(scored.env_steps),
            'actor': {k: v.detach().cpu().clone() for k, v in state.actor.items()},
            'obs_mean': np.asarray(state.obs_mean, np.float32),
            'obs_std': np.asarray(state.obs_std, np.float32),
            'obs_clip': float(state.obs_clip),
            'stats': {'episodes': int(stats.episodes), 'steps': int(stats.steps),
                      'successes': int(stats.successes),
                      # Lists, not arrays: an empty array pickles as a call of bytes(),
                      # which torch.load(weights_only=True) refuses.
                      'returns': [float(v) for v in stats.returns],
                      'final_values': [float(v) for v in stats.final_values],
                      'safety': {str(k): int(v) for k, v in stats.safety.items()},
                      'seconds': float(stats.seconds),
                      'rank': {'key': stats.rank.key, 'label': stats.rank.label,
                               'unit': stats.rank.unit,
                               'lower_is_better': bool(stats.rank.lower_is_better)}}})
    return packed


def unpack_evaluations(packed: Any, actor: Mapping[str, torch.Tensor], obs_dim: int,
                       env_steps: int) -> list[Evaluation]:
    """
    Rebuild the evaluations of a checkpoint's record, every entry checked first.

    :param packed: ``checkpoint['evaluations']``.
    :param actor: the learner's actor state dict: the names and shapes every entry must have.
    :param obs_dim: the observation width of the task.
    :param env_steps: the checkpoint's env steps (no snapshot was taken after them).
    :raises RecordError: an entry does not fit (the message names the field).
    """
    if not isinstance(packed, (list, tuple)):
        raise RecordError(f'{EVALUATIONS_KEY}: a list expected, got {type(packed).__name__}')
    if len(packed) > MAX_ENTRIES:
        raise RecordError(f'{EVALUATIONS_KEY}: {len(packed)} entries, at most {MAX_ENTRIES}')
    return [_entry(entry, f'{EVALUATIONS_KEY}[{i}]', actor, obs_dim, env_steps)
            for i, entry in enumerate(packed)]


def _entry(entry: Any, where: str, actor: Mapping[str, torch.Tensor], obs_dim: int,
           env_steps: int) -> Evaluation:
    _keys(entry, _ENTRY_KEYS, where)
    version = _int(entry['version'], f'{where}.version', 0, 2**62)
    steps = _int(entry['env_steps'], f'{where}.env_steps', 0, env_steps)
    weights = entry['actor']
    _keys(weights, set(actor), f'{where}.actor')
    for name, reference in actor.items():
        tensor = weights[name]
        if not (isinstance(tensor, torch.Tensor) and tensor.is_floating_point()):
            raise RecordError(f'{where}.actor.{name}: a floating-point tensor expected')
        if tuple(tensor.shape) != tuple(reference.shape):
            raise RecordError(f'{where}.actor.{name}: shape {tuple(tensor.shape)}, expected '
                              f'{tuple(reference.shape)}')
    for name in ('obs_mean', 'obs_std'):
        value = entry[name]
        if not isinstance(value, np.ndarray) or value.dtype.kind != 'f':
            raise RecordError(f'{where}.{name}: a floating-point array expected')
    clip = entry['obs_clip']
    if not isinstance(clip, (int, float)) or isinstance(clip, bool):
        raise RecordError(f'{where}.obs_clip: a number expected')
    try:  # as a weight packet's state is rebuilt: widths, finite values, std > 0
        state = PolicyState.from_parts(
            {k: weights[k].detach().cpu().float().numpy() for k in actor},
            {'obs_mean': entry['obs_mean'], 'obs_std': entry['obs_std'], 'obs_clip': clip},
            version, obs_dim)
    except PolicyStateError as exc:
        raise RecordError(f'{where}.{exc}') from None
    return Evaluation(state, _stats(entry['stats'], f'{where}.stats'), steps)


def _stats(stats: Any, where: str) -> EpisodeStats:
    _keys(stats, _STATS_KEYS, where)
    episodes = _int(stats['episodes'], f'{where}.episodes', 1, MAX_EPISODES)
    successes = _int(stats['successes'], f'{where}.successes', 0, episodes)
    steps = _int(stats['steps'], f'{where}.steps', 0, 2**62)
    returns = _floats(stats['returns'], f'{where}.returns', episodes)
    finals = _floats(stats['final_values'], f'{where}.final_values', episodes, nan_ok=True)
    safety = stats['safety']
    if not isinstance(safety, Mapping) or len(safety) > 64:
        raise RecordError(f'{where}.safety: a mapping of at most 64 reasons expected')
    counts = Counter({str(k): _int(v, f'{where}.safety.{k}', 0, steps)
                      for k, v in safety.items()})
    seconds = stats['seconds']
    if not (isinstance(seconds, float) and math.isfinite(seconds) and seconds >= 0):
        raise RecordError(f'{where}.seconds: a finite number >= 0 expected')
    rank = stats['rank']
    _keys(rank, _RANK_KEYS, f'{where}.rank')
    for name in ('key', 'label', 'unit'):
        if not isinstance(rank[name], str) or len(rank[name]) > 64:
            raise RecordError(f'{where}.rank.{name}: a string of at most 64 characters '
                              'expected')
    if not isinstance(rank['lower_is_better'], bool):
        raise RecordError(f'{where}.rank.lower_is_better: true or false expected')
    return EpisodeStats(episodes=episodes, steps=steps, successes=successes, returns=returns,
                        final_values=finals, safety=counts, seconds=seconds,
                        rank=RankMetric(**rank))


def _keys(value: Any, expected: set, where: str) -> None:
    if not isinstance(value, Mapping):
        raise RecordError(f'{where}: a mapping expected, got {type(value).__name__}')
    missing, unknown = expected - set(value), set(value) - expected
    if missing or unknown:
        what = (f'{sorted(missing)[0]} missing' if missing
                else f'unknown entry {sorted(map(str, unknown))[0]}')
        raise RecordError(f'{where}: {what}')


def _int(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise RecordError(f'{where}: an integer expected, got {type(value).__name__}')
    if not low <= int(value) <= high:
        raise RecordError(f'{where}: {int(value)}, allowed {low} to {high}')
    return int(value)


def _floats(value: Any, where: str, episodes: int, nan_ok: bool = False) -> list[float]:
    """Check one number per episode (or none: an evaluator that did not keep them)."""
    if not isinstance(value, (list, tuple)) or len(value) not in (0, episodes) or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
        raise RecordError(f'{where}: a list of {episodes} numbers (or none) expected')
    out = [float(v) for v in value]
    if any(math.isinf(v) or (math.isnan(v) and not nan_ok) for v in out):
        raise RecordError(f'{where}: non-finite values')
    return out
