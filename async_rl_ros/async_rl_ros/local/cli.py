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
``async-rl-train``: the no-ROS entry point.

It reads the same ``ros__parameters`` YAML the ROS 2 nodes read. Configuration errors print
one line naming the key, its value and what is allowed, and exit with status 2.
"""

from __future__ import annotations

import argparse
from collections import Counter
import dataclasses
from pathlib import Path
import sys
import time
from typing import Any, Callable, Sequence

from async_rl_ros.core.config import ConfigError, EnvWorkerConfig, load_node_config
import numpy as np
import yaml

__all__ = ['main', 'default_config_path', 'parse_overrides', 'EpisodeStats', 'run_episodes']

EXIT_CONFIG_ERROR = 2


def default_config_path() -> Path | None:
    """Return the shipped ``config/train.yaml`` (source tree or ROS install), if found."""
    here = Path(__file__).resolve()
    candidates = [here.parents[2] / 'config' / 'train.yaml']
    try:
        from ament_index_python.packages import get_package_share_directory
        candidates.append(Path(get_package_share_directory('async_rl_ros')) / 'config'
                          / 'train.yaml')
    except (ImportError, LookupError):
        pass
    return next((p for p in candidates if p.is_file()), None)


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Turn ``['task.control_hz=50', ...]`` into ``{'task.control_hz': 50}`` (YAML values)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition('=')
        if not sep or not key:
            raise ConfigError('--set', item, 'KEY=VALUE, e.g. task.control_hz=50')
        try:
            out[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(key, raw, 'a YAML scalar or list') from None
    return out


@dataclasses.dataclass
class EpisodeStats:
    """Summary of a batch of evaluation or demo episodes."""

    episodes: int = 0
    steps: int = 0
    successes: int = 0
    returns: list[float] = dataclasses.field(default_factory=list)
    final_distances: list[float] = dataclasses.field(default_factory=list)
    safety: Counter = dataclasses.field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def success_rate(self) -> float:
        """Fraction of episodes that ended within the success distance."""
        return self.successes / self.episodes if self.episodes else 0.0

    def rows(self) -> list[tuple[str, str]]:
        """Return ``(name, value)`` rows for a printed table."""
        rate = self.steps / self.seconds if self.seconds > 0 else float('nan')
        reasons = ', '.join(f'{k} {v}' for k, v in sorted(self.safety.items())) or 'none'
        return [('episodes', f'{self.episodes}'), ('env steps', f'{self.steps}'),
                ('success rate', f'{100.0 * self.success_rate:.1f} %'),
                ('mean final distance', f'{np.mean(self.final_distances):.4f} m'),
                ('mean return', f'{np.mean(self.returns):.2f}'),
                ('env steps/s', f'{rate:.0f}'),
                ('safety interventions', reasons)]


def run_episodes(env, policy: Callable[[np.ndarray], np.ndarray], episodes: int, seed: int,
                 progress: bool = False) -> EpisodeStats:
    """
    Run ``episodes`` episodes of ``policy`` and collect statistics.

    Success is judged at the end of the episode (final distance below the threshold).
    """
    from tqdm import tqdm

    stats = EpisodeStats()
    start = time.perf_counter()
    bar = tqdm(range(episodes), desc='episodes', unit='ep', disable=not progress,
               dynamic_ncols=True)
    for ep in bar:
        obs, info = env.reset(seed=seed + ep)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, info = env.step(policy(obs))
            total += reward
            stats.steps += 1
            stats.safety.update(info['safety'])
            done = terminated or truncated
        stats.episodes += 1
        stats.successes += int(info['is_success'])
        stats.returns.append(total)
        stats.final_distances.append(info['distance'])
        bar.set_postfix(success=f'{stats.success_rate:.2f}')
    stats.seconds = time.perf_counter() - start
    return stats


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    """Print a two-column table."""
    width = max(len(name) for name, _ in rows)
    print(f'\n{title}')
    print('-' * (width + 24))
    for name, value in rows:
        print(f'{name:<{width}}  {value}')


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='async-rl-train',
        description='Run the simulated UR5 reach task without ROS.')
    parser.add_argument('--config', type=Path, default=None,
                        help='ros__parameters YAML file (default: the shipped config/train.yaml)')
    parser.add_argument('--set', dest='overrides', action='append', default=[],
                        metavar='KEY=VALUE', help='override one env_worker parameter, '
                        'e.g. --set task.control_hz=50 (repeatable)')
    parser.add_argument('--policy', choices=('scripted', 'random'), default='scripted',
                        help='controller to run: a damped-least-squares reach controller or '
                        'uniform random actions')
    parser.add_argument('--episodes', type=int, default=20, help='number of episodes')
    parser.add_argument('--render', action='store_true',
                        help='open the PyBullet GUI to watch (needs a display)')
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``async-rl-train``; returns the process exit status."""
    args = _build_parser().parse_args(argv)
    try:
        if args.episodes < 1:
            raise ConfigError('--episodes', args.episodes, '>= 1')
        config_path = args.config if args.config is not None else default_config_path()
        cfg = load_node_config(config_path, 'env_worker', EnvWorkerConfig,
                               parse_overrides(args.overrides))
        from async_rl_ros.envs.reach_env import UR5ReachEnv
        from async_rl_ros.envs.scripted import ScriptedReachPolicy
        env = UR5ReachEnv(cfg, render_mode='human' if args.render else None)
    except ConfigError as exc:
        print(f'async-rl-train: configuration error: {exc}', file=sys.stderr)
        return EXIT_CONFIG_ERROR
    try:
        if args.policy == 'scripted':
            policy = ScriptedReachPolicy(np.asarray(env.speed))
        else:
            env.action_space.seed(cfg.seed)
            policy = (lambda _obs: env.action_space.sample())  # noqa: E731
        stats = run_episodes(env, policy, args.episodes, cfg.seed, progress=sys.stderr.isatty())
    finally:
        env.close()
    print_table(f'UR5 reach, {args.policy} policy '
                f'(config: {config_path or "built-in defaults"})', stats.rows())
    return 0


if __name__ == '__main__':
    sys.exit(main())
