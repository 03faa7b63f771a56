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

"""Shared test helpers."""

import importlib
import importlib.util
import os
import pathlib
import sys

import pytest

# The test directory is not a package (colcon runs pytest from the package root):
# make ``from conftest import ...`` work from every test module.
sys.path.insert(0, os.path.dirname(__file__))


#: the repository's root: the package's folder, the messages, bench/, docs/ (a source checkout)
REPO = pathlib.Path(__file__).resolve().parents[2]
#: the repository's bench folder (absent outside a source checkout)
BENCH = REPO / 'bench'
#: the repository's scripts beside the package (benches, tools), linted by the package's rules
SCRIPTS = [d for d in (BENCH, BENCH.parent / 'tools') if d.is_dir()]


def load_bench(name: str):
    """Import ``bench/<name>.py`` as the script runs: its folder on ``sys.path`` (``_*.py``)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f'bench_{name}', BENCH / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def require_linter(module: str):
    """
    Import an ament linter module or skip the test.

    CI sets ``ASYNC_RL_REQUIRE_LINTERS=1``: a missing linter then fails instead of skipping,
    so a broken install can never turn the lint checks silently off.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if os.environ.get('ASYNC_RL_REQUIRE_LINTERS') == '1':
            raise
        pytest.skip(f'{module} is not installed ({exc}); see the README for the linters')


def tiny_config(tmp_path, **flat):
    """
    Return a learner config small enough for a test: 32x32 networks, updates after 64 steps.

    :param tmp_path: where checkpoints and logs go.
    :param flat: dotted overrides on top (``'sac.hidden_sizes': [64, 64]``).
    """
    from async_rl_ros.core.config import LearnerConfig

    base = {'sac.hidden_sizes': [32, 32], 'batch.initial_batch': 64, 'batch.min_batch': 8,
            'replay.capacity': 10_000, 'learning_starts': 64, 'warmup_steps': 100,
            'checkpoint.directory': str(tmp_path / 'ckpt'), 'log_dir': str(tmp_path / 'runs')}
    base.update(flat)
    return LearnerConfig().replace(**base)


def transitions(n: int, rng, worker: int = 0, version: int = 0, obs_dim: int = 5,
                act_dim: int = 2) -> dict:
    """
    Return ``n`` random transitions as a worker sends them (the learner tests' 5 / 2 widths).

    :param worker: the ``worker_id`` of every row.
    :param version: the ``policy_version`` every row was acted with.
    """
    import numpy as np

    obs = rng.normal(size=(n, obs_dim)).astype(np.float32) * 3.0 + 1.0
    action = rng.uniform(-1, 1, size=(n, act_dim)).astype(np.float32)
    return {'obs': obs, 'action': action, 'reward': -np.abs(action).sum(1).astype(np.float32),
            'next_obs': obs + 0.1, 'terminated': np.zeros(n, bool), 'truncated': np.zeros(n, bool),
            'policy_version': np.full(n, version), 'worker_id': np.full(n, worker)}


def scripted_loop(learner, take, blocking=False, publish=None, commit_every=10**6):
    """
    Return a training loop whose source's ``take()`` is the test's (free-running workers).

    The source never waits or respawns; no reports. With ``blocking`` it is a lockstep source
    instead (sync, single process): the loop asks for the next round only when it owes no
    update. ``publish(state)`` is the sink's (default: nothing is published).
    """
    from async_rl_ros.core.learning.loop import TrainingLoop
    from async_rl_ros.core.learning.metrics import MetricsLogger

    class Workers:

        def wait(self, timeout):
            pass

        def maintain(self, learner):
            pass

        def metrics(self):
            return {}

    class Sink:

        def publish(self, state):
            return None if publish is None else publish(state)

    source = Workers()
    source.take, source.blocking = take, blocking
    return TrainingLoop(learner, source, Sink(), commit_every=commit_every,
                        logger=MetricsLogger(), stats_interval_s=1e9)


@pytest.fixture
def run(request):
    """Yield a controller double with a UR5 backend on it (``ur_double.backend.Run``)."""
    from ur_double.backend import Run

    r = Run(**request.param)
    yield r
    r.close()
