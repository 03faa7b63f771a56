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

It reads the same ``ros__parameters`` YAML the ROS 2 nodes read. Every expected failure ends
in one line on stderr, never a traceback: a configuration error names the key, its value and
what is allowed; a checkpoint error names the file and what is wrong (both exit 2). SIGINT and
SIGTERM stop the run cleanly whatever stdout is (a pipe whose reader is gone included): the
final checkpoint and artifacts are written, then the exit status is 130 or 143. A diverged
training run or a robot that needs a person exits 3 after saving. The exit codes are listed in
:mod:`async_rl_ros.local.lifecycle`. Progress is a bar on a terminal and a plain line every
``local_runner.stats_interval_s`` otherwise.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import re
import sys
from typing import Any, Sequence

from async_rl_ros.core.config import (ConfigError, EnvWorkerConfig, LearnerConfig,
                                      LocalRunnerConfig, NODE_SECTIONS)
from async_rl_ros.core.errors import describe_missing
from async_rl_ros.core.learning.evaluation import run_episodes
from async_rl_ros.local.lifecycle import (describe_failure, EXIT_BAD_INPUT, EXIT_FAILED,
                                          EXIT_SIGINT, expected_failures, StopRequest)
from async_rl_ros.local.output import guard_output, say
import yaml

__all__ = ['main', 'default_config_path', 'parse_overrides', 'print_table', 'summary_rows']

EXIT_CONFIG_ERROR = EXIT_BAD_INPUT
#: Episodes a controller runs when ``--episodes`` is not given.
CONTROLLER_EPISODES = 20
#: What ``--policy`` takes besides the path of an exported policy file.
POLICIES = ('sac', 'scripted', 'random')


def default_config_path() -> Path | None:
    """Return the shipped ``config/train.yaml`` (source tree or ROS install), if found."""
    here = Path(__file__).resolve()
    candidates = [here.parents[2] / 'config' / 'train.yaml']
    # an installed ROS 2 package: <prefix>/share/async_rl_ros (the ament index, read plainly)
    for prefix in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep):
        if prefix:
            candidates.append(Path(prefix) / 'share' / 'async_rl_ros' / 'config' / 'train.yaml')
    return next((p for p in candidates if p.is_file()), None)


class _OverrideLoader(yaml.SafeLoader):
    """YAML whose booleans are YAML 1.2's, ``true`` and ``false``: ``off`` stays a word."""


_OverrideLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != 'tag:yaml.org,2002:bool']
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_OverrideLoader.add_implicit_resolver(
    'tag:yaml.org,2002:bool', re.compile(r'^(?:true|True|TRUE|false|False|FALSE)$'),
    list('tTfF'))


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """
    Turn ``['task.control_hz=50', ...]`` into ``{'task.control_hz': 50}`` (YAML values).

    Only ``true`` and ``false`` are booleans (YAML 1.2): ``sac.compile=off`` is the word
    ``'off'``, as the option wants, not YAML 1.1's ``False``.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition('=')
        if not sep or not key:
            raise ConfigError('--set', item, 'KEY=VALUE, e.g. task.control_hz=50')
        try:
            out[key.strip()] = yaml.load(raw, Loader=_OverrideLoader)  # noqa: S506
        except yaml.YAMLError:
            raise ConfigError(key, raw, 'a YAML scalar or list') from None
    return out


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    """Print a two-column table."""
    width = max(len(name) for name, _ in rows)
    print(f'\n{title}')
    print('-' * (width + 24))
    for name, value in rows:
        print(f'{name:<{width}}  {value}')


def summary_rows(summary: dict[str, Any], evaluation: Any, outcome: str
                 ) -> list[tuple[str, str]]:
    """Return the end-of-run table from ``summary.json``'s data and the final evaluation."""
    s = summary
    workers = f", worker processes: {s['workers']}" if 'workers' in s else ''
    rows = [('task', s.get('task', '?') + (f" ({s['note']})" if 'note' in s else '')),
            ('mode', f"{s['mode']}{workers}"),
            ('networks (hidden units)', str(s.get('hidden_sizes', '?'))),
            ('env steps, updates', f"{s['env_steps']}, {s['updates']}"),
            ('wall time', f"{s['wall_time_s']:.0f} s"),
            ('samples/s, updates/s', f"{s['samples_per_s']:.0f}, {s['updates_per_s']:.1f}"),
            ('outcome', outcome)]
    if 'transition_lag_p50' in s:
        rows.append(('policy lag p50 / p99 / max', ' / '.join(
            f"{s[f'transition_lag_{k}']:.0f}" for k in ('p50', 'p99', 'max')) + ' versions'))
    if 'dropped_batches' in s:
        rows.append(('dropped batches, rejected packets, respawns',
                     f"{s['dropped_batches']}, {s['rejected_packets']}, {s['respawns']}"))
    if s.get('weights_reduction') is not None:
        rows.append(('weights received', f"{s['weights_policies_received']} policies, "
                     f"{100 * s['weights_reduction']:.1f} % fewer bytes than fp32"))
    if 'exported_policy_version' in s:
        online = ', online actor' if s.get('exported_policy_actor') == 'online' else ''
        rows.append(('exported policy', f"version {s['exported_policy_version']}{online} "
                     f"(evaluated {100 * s['exported_policy_success_rate']:.0f} % at "
                     f"{s['exported_policy_env_steps']} env steps)"))
    if s.get('export_candidates'):
        rows.append(('export chosen on fresh episodes', ', '.join(
            f"v{c['version']}{' online' if c.get('online_actor') else ''} "
            f"{100 * c['selection_success_rate']:.0f} %"
            for c in s['export_candidates'])))
    if 'final_evaluation' in s:  # skipped after a stop signal
        rows.append(('held-out evaluation', s['final_evaluation']))
    else:
        rows += [(f'held-out {name}', value) for name, value in evaluation.rows(rate=False)]
    if 'last_policy_success_rate' in s:
        rows.append(('last policy success rate',
                     f"{100 * s['last_policy_success_rate']:.1f} % (evaluator's episodes)"))
    log_dir = Path(s['policy']).parent
    rows += [('checkpoint', s['checkpoint']), ('policy (TorchScript)', s['policy']),
             ('learning curve', s['learning_curve']), ('summary', str(log_dir / 'summary.json')),
             ('TensorBoard', f'tensorboard --logdir {log_dir}'),
             ('play it back', f"async-rl-train --policy {s['policy']} --render")]
    return rows


#: The node sections a run without ROS reads (``ros_transport`` is the ROS 2 nodes' alone).
LOCAL_NODES = ('env_worker', 'learner', 'local_runner')


def split_overrides(overrides: dict[str, Any],
                    read: tuple[str, ...] = LOCAL_NODES) -> dict[str, dict[str, Any]]:
    """
    Route ``--set`` keys to their node: ``learner.sac.gamma``, ``env_worker.task.control_hz``.

    A key without a node prefix goes to the node that declares it (``env_worker`` first).

    :param read: the nodes the command reads; a key of another node is refused, not ignored.
    :raises ConfigError: a node without a key, or a key of a node the command does not read.
    """
    nodes: dict[str, dict[str, Any]] = {node: {} for node in read}
    known = {node: {name for name, *_ in NODE_SECTIONS[node].options()} for node in nodes}
    for key, value in overrides.items():
        node, _, rest = key.partition('.')
        if node in NODE_SECTIONS and node not in nodes:
            raise ConfigError('--set', f'{key}={value}', f'a key of {", ".join(read)}; this '
                              f'command reads no {node} section')
        if node in nodes and not rest:
            example = min(known[node], key=len)
            raise ConfigError('--set', f'{key}={value}', f'a key inside the node, e.g. '
                              f'{node}.{example}=...; every key: docs/parameters.md')
        if node in nodes:
            nodes[node][rest] = value
        else:
            owner = next((n for n in nodes if key in known[n]), 'env_worker')
            nodes[owner][key] = value
    return nodes


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='async-rl-train',
        description='Train SAC on a task (or run a controller on it) without ROS: the UR5 '
        'tasks (reach, push, pick_and_place), any Gymnasium goal-conditioned env (gym:ID) or a '
        'registered task.')
    parser.add_argument('--config', type=Path, default=None,
                        help='ros__parameters YAML file (default: the shipped config/train.yaml)')
    parser.add_argument('--set', dest='overrides', action='append', default=[],
                        metavar='KEY=VALUE', help='override one parameter, e.g. '
                        '--set learner.total_env_steps=50000 or --set task.control_hz=50 '
                        '(repeatable)')
    parser.add_argument('--task', default=None, metavar='NAME',
                        help='task to learn (env_worker.task.name): reach, push, '
                        'pick_and_place, gym:ID such as '
                        'gym:PandaPush-v3 (simulation only), or a task registered under the '
                        'async_rl_ros.tasks entry point group (default: the config value, '
                        'reach)')
    parser.add_argument('--policy', default='sac', metavar='{sac,scripted,random,FILE}',
                        help="train SAC (default), or run a controller: the task's scripted "
                        'one (reach, push, pick_and_place), uniform random actions, or an '
                        'exported policy file such as runs/async_rl/latest/policy.pt (on the '
                        'held-out episodes that judged it; its task, and the configuration in '
                        'its run folder, unless --task or --config say otherwise)')
    parser.add_argument('--mode', choices=('single', 'async', 'sync'), default=None,
                        help='async: env-worker processes that never wait for the learner; '
                        'sync: the same in lockstep (baseline); single: the learner steps one '
                        'env itself (default: local_runner.mode of the config, async)')
    parser.add_argument('--workers', type=int, default=None,
                        help='env worker processes for async/sync (default: physical cores - 1)')
    parser.add_argument('--steps', type=int, default=None,
                        help='training budget in env steps (learner.total_env_steps)')
    parser.add_argument('--resume', nargs='?', const='latest', default=None, metavar='RUN',
                        help='continue a run in its folder under learner.log_dir: the latest '
                        '(default) or the one named (its folder name or path), with the '
                        'configuration it was started with (config.yaml in its folder) '
                        'unless --config names a file; the other options change it')
    parser.add_argument('--episodes', type=int, default=None,
                        help='episodes a controller runs (default 20) or the held-out '
                        'episodes that judge the exported policy (sac, default '
                        'learner.final_eval_episodes)')
    parser.add_argument('--render', action='store_true',
                        help='open the PyBullet GUI to watch a controller, a simulated UR5 '
                        'paced to its control rate (needs a display)')
    return parser


def _load(args: argparse.Namespace
          ) -> tuple[Path | None, EnvWorkerConfig, LearnerConfig, LocalRunnerConfig]:
    if args.episodes is not None and args.episodes < 1:
        raise ConfigError('--episodes', args.episodes, '>= 1')
    if args.steps is not None and args.steps < 1:
        raise ConfigError('--steps', args.steps, '>= 1')
    path = args.config if args.config is not None else default_config_path()
    overrides = split_overrides(parse_overrides(args.overrides))
    if args.policy not in POLICIES:  # a policy file: its task, in its run's configuration
        from async_rl_ros.core.policy_file import read_manifest
        manifest = read_manifest(_policy_file(args.policy))
        if manifest is not None and args.task is None:
            overrides['env_worker']['task.name'] = manifest.task
        from async_rl_ros.core.learning.run_folder import CONFIG
        beside = Path(args.policy).parent / CONFIG
        if args.config is None and beside.is_file():
            path = beside
    if args.steps is not None:
        overrides['learner']['total_env_steps'] = args.steps
    if args.episodes is not None and args.policy == 'sac':
        overrides['learner']['final_eval_episodes'] = args.episodes
    if args.workers is not None:
        if args.workers < 1:
            raise ConfigError('--workers', args.workers, '>= 1')
        overrides['local_runner']['num_workers'] = args.workers
    if args.mode is not None:
        overrides['local_runner']['mode'] = args.mode
    if args.task is not None:
        overrides['env_worker']['task.name'] = args.task
    from async_rl_ros.envs.tasks import load_sections
    nodes = LOCAL_NODES
    loaded = load_sections(path, overrides, nodes)
    if args.resume is not None and args.config is None:
        # The run's own configuration, under the options given now (--steps, --set ...).
        saved = _saved_config(loaded['learner'].log_dir, args.resume)
        if saved is not None:
            path = saved
            loaded = load_sections(path, overrides, nodes)
    return path, loaded['env_worker'], loaded['learner'], loaded['local_runner']


def _policy_file(value: str) -> Path:
    """Return ``--policy``'s value as a file; :class:`ConfigError` if there is none."""
    path = Path(value)
    if not path.is_file():
        raise ConfigError('--policy', value, f'one of {", ".join(POLICIES)}, or an exported '
                          'policy file that exists (e.g. runs/async_rl/latest/policy.pt)')
    return path


def _saved_config(root: str, run: str) -> Path | None:
    """Return the configuration a run folder keeps, ``None`` if none (an older run)."""
    from async_rl_ros.core.learning.run_folder import CONFIG, find_run, RunFolderError
    try:
        path = find_run(root, run) / CONFIG
    except RunFolderError:
        return None  # no such run: resuming it says so
    return path if path.is_file() else None


def _train(args: argparse.Namespace, stop: StopRequest) -> int:
    config_path, env_cfg, learner_cfg, runner_cfg = _load(args)
    from async_rl_ros.local.train import train
    result = train(env_cfg, learner_cfg, runner_cfg, resume=args.resume, stop=stop)
    print_table(f'{env_cfg.task.name}, SAC {runner_cfg.mode} (config: {config_path})',
                summary_rows(result.summary, result.evaluation, stop.outcome))
    if stop.failure is not None:
        say(f'async-rl-train: {stop.outcome}')
    return stop.exit_code()


def _control(args: argparse.Namespace, stop: StopRequest) -> int:
    """Run a scripted, random or exported policy (no training, nothing to save)."""
    config_path, env_cfg, _, _ = _load(args)
    from async_rl_ros.envs.tasks import get_task
    task = get_task(env_cfg.task.name)
    scripted = getattr(task, 'scripted', None)
    if args.policy == 'scripted' and scripted is None:
        raise ConfigError('--policy', 'scripted', f'random for task {task.name!r}: it has no '
                          f'scripted controller (reach, push and pick_and_place have one)')
    from async_rl_ros.envs.factory import build_env
    # build_env checks the configuration against the task and returns its spec
    env, spec = build_env(env_cfg, render_mode='human' if args.render else None)  # no training
    seed, name, fitted = env_cfg.seed, f'{args.policy} policy', None
    try:
        if args.policy == 'scripted':
            policy = scripted(env)
        elif args.policy == 'random':
            env.action_space.seed(env_cfg.seed)
            policy = (lambda _obs: env.action_space.sample())  # noqa: E731
        else:  # a policy file, checked against the task, on the episodes that judged it
            from async_rl_ros.core.workers.inference import FittedPolicy
            from async_rl_ros.core.workers.inline import HELD_OUT_SEED
            policy = fitted = FittedPolicy.load(args.policy, spec.name, spec.obs_dim,
                                                spec.act_dim)
            seed, name = HELD_OUT_SEED, f'policy {args.policy}'
        stats = run_episodes(env, policy, args.episodes or CONTROLLER_EPISODES, seed,
                             progress=sys.stderr.isatty(), rank=spec.rank)
    finally:
        env.close()
    rows = []
    if fitted is not None:  # what each action took, as a control loop would see it
        ms = fitted.latency.summary()
        rows = [('policy latency p50 / p99 / max', ' / '.join(
            f'{ms[k]:.3f}' for k in ('p50', 'p99', 'max')) + ' ms')]
    print_table(f'{spec.name}, {name} (config: {config_path or "built-in defaults"})',
                stats.rows() + rows)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``async-rl-train``; returns the process exit status."""
    guard_output()
    args = _build_parser().parse_args(argv)
    from async_rl_ros.core.learning.resume import CheckpointError
    from async_rl_ros.core.learning.run_folder import RunFolderError
    from async_rl_ros.core.policy_file import PolicyFileError
    training = args.policy == 'sac'
    # Training polls the stop request and saves; a controller has nothing to save, so there
    # the first signal interrupts at once (and its env is closed on the way out).
    stop = StopRequest(interrupt=not training)
    try:
        with stop:
            return _train(args, stop) if training else _control(args, stop)
    except ConfigError as exc:
        say(f'async-rl-train: configuration error: {exc}')
        return EXIT_CONFIG_ERROR
    except CheckpointError as exc:
        say(f'async-rl-train: checkpoint error: {exc}')
        return EXIT_BAD_INPUT
    except RunFolderError as exc:
        say(f'async-rl-train: run folder: {exc}')
        return EXIT_BAD_INPUT
    except PolicyFileError as exc:
        say(f'async-rl-train: policy file {exc}')
        return EXIT_BAD_INPUT
    except ModuleNotFoundError as exc:  # an extra that is not installed (sim, learn, real)
        missing = describe_missing(exc)
        if missing is None:
            raise
        say(f'async-rl-train: {missing}')
        return EXIT_BAD_INPUT
    except expected_failures() as exc:
        say(f'async-rl-train: {describe_failure(exc)}: {exc}')
        return EXIT_FAILED
    except KeyboardInterrupt:
        if stop.signum is not None and not training:
            say(f'async-rl-train: {stop.outcome}')
            return stop.exit_code()
        say('async-rl-train: aborted; the final checkpoint was not written'
            if training else 'async-rl-train: interrupted')
        return EXIT_SIGINT


if __name__ == '__main__':
    sys.exit(main())
