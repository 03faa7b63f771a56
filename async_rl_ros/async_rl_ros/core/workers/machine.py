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
What this machine holds: how many worker processes a run starts and may start.

The local runner's default is one worker per physical core but one (the learner keeps a
core); a count given by hand, to the local runner or to the ROS 2 launch, is checked against
free memory before any process starts (:func:`check_memory`).
"""

from __future__ import annotations

import os

from async_rl_ros.core.config import ConfigError
import psutil

__all__ = ['CHILD_MEMORY_BYTES', 'check_memory', 'default_num_workers']

#: memory one child process (an env worker, a shard) takes: a push worker measured 180 MB of
#: its own and 280 MB resident (2026-12-06), a shard 150 MB of its own
CHILD_MEMORY_BYTES = 250 * 2**20


def check_memory(num_workers: int, others: int, key: str, given: int,
                 available: int | None = None) -> None:
    """
    Refuse more worker processes than this machine's free memory holds.

    A thousand workers asked for by a typo would push the machine out of memory, and its
    kernel then kills processes that are not this run's.

    :param num_workers: the worker processes ``key`` asks for.
    :param others: the run's other child processes (shards, an evaluator, a physical arm's
        worker).
    :param key: the option that set the count (``local_runner.num_workers``, a launch
        argument).
    :param given: its value as given (0: the default).
    :param available: bytes of free memory (default: what the OS reports).
    :raises ConfigError: naming ``key`` and how many fit.
    """
    if available is None:
        available = psutil.virtual_memory().available
    fit = max(available // CHILD_MEMORY_BYTES - others, 1)
    if num_workers > fit:
        raise ConfigError(key, given, f'<= {fit} on this machine: a worker process takes '
                          f'about {CHILD_MEMORY_BYTES / 2**20:.0f} MB and '
                          f'{available / 2**30:.1f} GB of memory are free for them and '
                          f'{others} other processes')


def default_num_workers() -> int:
    """Return physical cores - 1 (at least 1): one core stays with the learner."""
    cores = psutil.cpu_count(logical=False) or os.cpu_count() or 2
    return max(1, cores - 1)
