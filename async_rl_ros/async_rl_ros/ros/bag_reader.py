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

Read with the `rosbags` library, so it works with or without a ROS 2 install (and is tested
without one). The message definitions come from the ``.msg`` files of
``async_rl_ros_interfaces``: its installed ``share`` directory on ``AMENT_PREFIX_PATH``, or
the source tree next to this package. Each message goes through the same
:func:`~async_rl_ros.ros.conversions.msg_to_batch` as a live one, so a malformed recording
is rejected batch by batch, never loaded half-checked.
"""

from __future__ import annotations

import os
import pathlib
from typing import Iterator

from async_rl_ros.core.weights.codec import CodecError
from async_rl_ros.ros.conversions import msg_to_batch
import numpy as np

__all__ = ['TRANSITION_TYPE', 'find_msg_dir', 'typestore_with_interfaces',
           'read_transition_bag']

TRANSITION_TYPE = 'async_rl_ros_interfaces/msg/TransitionBatch'
_PACKAGE = 'async_rl_ros_interfaces'


def find_msg_dir() -> pathlib.Path:
    """
    Locate the ``.msg`` files of ``async_rl_ros_interfaces``.

    :returns: ``<prefix>/share/async_rl_ros_interfaces/msg`` of the first prefix on
        ``AMENT_PREFIX_PATH`` that has it, else the source tree's ``msg`` directory.
    :raises FileNotFoundError: neither exists.
    """
    for prefix in filter(None, os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep)):
        candidate = pathlib.Path(prefix) / 'share' / _PACKAGE / 'msg'
        if (candidate / 'TransitionBatch.msg').is_file():
            return candidate
    source = pathlib.Path(__file__).resolve().parents[3] / _PACKAGE / 'msg'
    if (source / 'TransitionBatch.msg').is_file():
        return source
    raise FileNotFoundError(f'no {_PACKAGE}/msg directory on AMENT_PREFIX_PATH or at {source}')


def typestore_with_interfaces(msg_dir: str | os.PathLike | None = None):
    """
    Return a rosbags type store that knows the ROS 2 standard and our message types.

    :param msg_dir: directory of the ``.msg`` files (:func:`find_msg_dir` when ``None``).
    """
    from rosbags.typesys import get_types_from_msg, get_typestore, Stores

    store = get_typestore(Stores.ROS2_HUMBLE)
    types = {}
    for path in sorted(pathlib.Path(msg_dir or find_msg_dir()).glob('*.msg')):
        name = f'{_PACKAGE}/msg/{path.stem}'
        types.update(get_types_from_msg(path.read_text(encoding='utf-8'), name))
    store.register(types)
    return store


def read_transition_bag(path: str | os.PathLike, obs_dim: int | None = None,
                        act_dim: int | None = None, msg_dir: str | os.PathLike | None = None,
                        rejected: dict[str, int] | None = None
                        ) -> Iterator[dict[str, np.ndarray]]:
    """
    Yield the transition batches of every ``TransitionBatch`` topic of a recording.

    :param path: the bag directory (sqlite3 or mcap storage, as rosbags reads them).
    :param obs_dim: expected observation width (checked when given).
    :param act_dim: expected action width (checked when given).
    :param msg_dir: directory of the ``.msg`` files.
    :param rejected: if given, malformed batches are counted here by reason and skipped;
        otherwise the first one raises :class:`CodecError`.
    :returns: batches in the layout ``Learner.ingest`` takes (plus ``source``).
    """
    from rosbags.rosbag2 import Reader

    store = typestore_with_interfaces(msg_dir)
    with Reader(path) as reader:
        connections = [c for c in reader.connections if c.msgtype == TRANSITION_TYPE]
        if not connections:
            return
        for connection, _, raw in reader.messages(connections=connections):
            msg = store.deserialize_cdr(raw, connection.msgtype)
            try:
                yield msg_to_batch(msg, obs_dim, act_dim)
            except CodecError as exc:
                if rejected is None:
                    raise
                rejected[exc.reason] = rejected.get(exc.reason, 0) + 1
