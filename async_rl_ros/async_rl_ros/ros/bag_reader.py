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
Transitions from a rosbag2 recording (``ros2 bag record`` of ``TransitionBatch`` topics).

Read with ``rosbag2_py``, the library behind ``ros2 bag`` itself: a recording opens
through the storage plugins of the distro that wrote it (mcap, Jazzy's default; sqlite3,
Humble's default and ``-s sqlite3``; compressed or not), so whatever ``ros2 bag record``
wrote reads back, and nothing else is needed where the learner runs (a ROS 2 node). Each
message is deserialized into the generated class a subscription receives and goes through
the same :func:`~async_rl_ros.ros.conversions.msg_to_batch` as a live one, so a malformed
recording is rejected batch by batch (counted), never loaded half-checked.

``rosbag2_py`` and ``rclpy`` are imported when a recording is opened: the path checks run
without ROS 2.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from typing import Any, Callable, Iterator, TYPE_CHECKING

from async_rl_ros.core.config import ConfigError
from async_rl_ros.core.weights.codec import CodecError
from async_rl_ros.ros.conversions import msg_to_batch
import numpy as np
import yaml

if TYPE_CHECKING:  # the launch file checks recordings without loading torch
    from async_rl_ros.core.learning.learner import Learner

__all__ = ['TRANSITION_TYPE', 'BagError', 'BagStats', 'check_bag', 'read_transition_bag',
           'usable_bag', 'warm_start']

TRANSITION_TYPE = 'async_rl_ros_interfaces/msg/TransitionBatch'


class BagError(ValueError):
    """A recording that cannot be used: missing, unreadable here, or without transitions."""


@dataclasses.dataclass
class BagStats:
    """What :func:`read_transition_bag` found (filled while it reads)."""

    storage: str = ''
    """Storage plugin of the recording (``mcap``, ``sqlite3``)."""
    topics: tuple[str, ...] = ()
    """Its ``TransitionBatch`` topics."""
    messages: int = 0
    """``TransitionBatch`` messages read."""
    transitions: int = 0
    """Transitions of the accepted batches."""
    rejected: dict[str, int] = dataclasses.field(default_factory=dict)
    """Malformed batches by reason (:attr:`CodecError.reason`), skipped."""


def _metadata_hint(path: pathlib.Path) -> str:
    """Return why this distro may not read the recording, from its ``metadata.yaml``."""
    meta = path / 'metadata.yaml' if path.is_dir() else path.parent / 'metadata.yaml'
    try:
        info = yaml.safe_load(meta.read_text(encoding='utf-8'))['rosbag2_bagfile_information']
        recorded = info.get('ros_distro') or ''
        storage = info.get('storage_identifier') or ''
    except (OSError, yaml.YAMLError, TypeError, KeyError, AttributeError):
        return ''
    here = os.environ.get('ROS_DISTRO', '')
    if recorded and here and recorded != here:
        return (f'; it was recorded with ROS 2 {recorded} ({storage} storage), this is '
                f'{here}: record it on {here}')
    return ''


def check_bag(path: str | os.PathLike) -> Any:
    """
    Open the metadata of a recording and return it (``rosbag2_py.BagMetadata``).

    :param path: the bag directory (or, on Jazzy, one of its storage files).
    :raises BagError: the path does not exist, has no ``metadata.yaml``, rosbag2 cannot read
        it, or it has no ``TransitionBatch`` topic; the message says which, in one line.
    """
    where = pathlib.Path(os.path.expanduser(os.fspath(path)))
    if not where.exists():
        raise BagError(f'{where} does not exist')
    if where.is_dir() and not (where / 'metadata.yaml').is_file():
        raise BagError(f'{where} has no metadata.yaml: not a rosbag2 recording, or one whose '
                       f'recorder was killed (ros2 bag reindex {where} rebuilds it)')
    import rosbag2_py

    try:
        metadata = rosbag2_py.Info().read_metadata(str(where), '')
    except RuntimeError as exc:
        raise BagError(f'rosbag2 cannot read {where}: {exc}{_metadata_hint(where)}') from None
    found = [t.topic_metadata for t in metadata.topics_with_message_count]
    if not any(t.type == TRANSITION_TYPE for t in found):
        listed = ', '.join(f'{t.name} [{t.type}]' for t in found) or 'none'
        raise BagError(f'{where} has no {TRANSITION_TYPE} topic (topics: {listed})')
    return metadata


def read_transition_bag(path: str | os.PathLike, obs_dim: int | None = None,
                        act_dim: int | None = None, stats: BagStats | None = None
                        ) -> Iterator[dict[str, np.ndarray]]:
    """
    Yield the transition batches of every ``TransitionBatch`` topic of a recording.

    Batches come in recording order; a malformed one (wrong widths or sizes, unknown source,
    bytes that do not deserialize) is counted in ``stats.rejected`` and skipped.

    :param path: the bag directory (any storage plugin this distro has).
    :param obs_dim: expected observation width (checked when given).
    :param act_dim: expected action width (checked when given).
    :param stats: filled with what was read (storage, topics, counts).
    :returns: batches in the layout ``Learner.ingest`` takes (plus ``source``).
    :raises BagError: see :func:`check_bag`; also when reading stops half-way.
    """
    stats = BagStats() if stats is None else stats
    metadata = check_bag(path)
    from async_rl_ros_interfaces.msg import TransitionBatch
    from rclpy.serialization import deserialize_message
    import rosbag2_py

    where = os.path.expanduser(os.fspath(path))
    stats.storage = metadata.storage_identifier
    stats.topics = tuple(sorted(t.topic_metadata.name for t in metadata.topics_with_message_count
                                if t.topic_metadata.type == TRANSITION_TYPE))
    reader = (rosbag2_py.SequentialCompressionReader() if metadata.compression_format
              else rosbag2_py.SequentialReader())
    try:
        reader.open(rosbag2_py.StorageOptions(uri=where, storage_id=stats.storage),
                    rosbag2_py.ConverterOptions('', ''))
        reader.set_filter(rosbag2_py.StorageFilter(topics=list(stats.topics)))
    except RuntimeError as exc:
        raise BagError(f'rosbag2 cannot open {where}: {exc}{_metadata_hint(pathlib.Path(where))}'
                       ) from None
    while True:
        try:
            if not reader.has_next():
                break
            _, data, _ = reader.read_next()
        except RuntimeError as exc:
            raise BagError(f'reading {where} stopped after {stats.messages} messages: {exc}'
                           ) from None
        stats.messages += 1
        try:
            batch = msg_to_batch(deserialize_message(data, TransitionBatch), obs_dim, act_dim)
        except CodecError as exc:
            stats.rejected[exc.reason] = stats.rejected.get(exc.reason, 0) + 1
            continue
        except Exception:  # noqa: B902 -- rclpy raises several types for undecodable bytes
            stats.rejected['format'] = stats.rejected.get('format', 0) + 1
            continue
        stats.transitions += len(batch['reward'])
        yield batch


def usable_bag(path: str, key: str = 'transport.warm_start_bag') -> Any:
    """
    Return the metadata of a recording to warm-start from (:func:`check_bag`).

    :param path: the recording.
    :param key: the option that named it, for the error (the launch file's config-file key or
        the learner node's parameter).
    :raises ConfigError: it cannot be used; the message says why, in one line.
    """
    try:
        return check_bag(path)
    except BagError as exc:
        raise _refused(key, path, exc) from None


def _refused(key: str, path: str, exc: BagError) -> ConfigError:
    return ConfigError(key, path, f'a rosbag2 recording of TransitionBatch topics: {exc}')


def warm_start(learner: 'Learner', path: str, log: Callable[[str], Any]) -> dict[str, Any]:
    """
    Fill a learner's replay buffer from a recording before any worker data; return the figures.

    The recorded transitions are no env steps of this run (``Learner.ingest(...,
    recorded=True)``): updates may start at once (``learning_starts`` is met), the budget,
    the warm-up and the workers' rate limit count this run's own steps. A recording that
    cannot be used (missing, unreadable, no ``TransitionBatch`` topic, every batch
    rejected) is a :class:`ConfigError` of ``transport.warm_start_bag``: the learner does not
    start cold instead.

    :param learner: the learner (its observation and action widths check the batches).
    :param path: ``transport.warm_start_bag``; empty: nothing to load, ``{}`` returned.
    :param log: where the one-line report goes (the node's logger).
    :returns: the ``warm_start`` entry of ``summary.json`` (``{}`` if nothing was loaded).
    """
    if not path:
        return {}
    if len(learner.replay):  # resumed with its replay buffer, the bag's data in it
        log(f'warm start from {path} skipped: the resumed replay buffer holds '
            f'{len(learner.replay)} transitions')
        return {}
    start = time.monotonic()
    stats = BagStats()
    stored = 0
    try:
        for batch in read_transition_bag(path, learner.obs_dim, learner.act_dim, stats):
            stored += learner.ingest(batch, recorded=True)
    except BagError as exc:
        raise _refused('transport.warm_start_bag', path, exc) from None
    rejected = ', '.join(f'{n} {reason}' for reason, n in sorted(stats.rejected.items()))
    if not stored:
        raise ConfigError('transport.warm_start_bag', path,
                          f'a recording of transitions with obs_dim {learner.obs_dim}, act_dim '
                          f'{learner.act_dim}: none of its {stats.messages} batches fits '
                          f'({rejected or "no finite transition"})')
    figures = {'bag': str(path), 'messages': stats.messages, 'transitions': stored,
               'rejected_batches': sum(stats.rejected.values()),
               'seconds': round(time.monotonic() - start, 3)}
    log(f'warm start: {stored} transitions from {stats.messages} messages on '
        f'{len(stats.topics)} topics of {path} ({stats.storage}) in {figures["seconds"]:.2f} s, '
        f'{figures["rejected_batches"]} batches rejected{f" ({rejected})" if rejected else ""}; '
        f'the replay buffer holds {len(learner.replay)} (hindsight copies included), learning '
        f'starts {"at once" if learner.ready() else "when it holds enough"}')
    return figures
