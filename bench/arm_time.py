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
Arm time to a reliable policy: one simulated arm paced to real time, as a physical UR5.

One worker process steps the simulated UR5 at the control rate on the wall clock
(``sim.real_time: true``, 25 Hz by default), which is how a physical arm delivers its
transitions; the learner trains on the rest of the machine with the shipped configuration,
so it runs as many updates per transition as it can, up to ``learner.max_updates_per_step``.
The evaluator process scores a snapshot every ``--eval-every`` env steps on fixed seeds; the
result is the arm time (env steps / control rate) of the first snapshot at the threshold, and
the update-to-data ratio the learner sustained (in this invocation: since the resume, on a
resumed run).

Usage: ``python bench/arm_time.py [--quick] [--task NAME] [--threshold F] [--budget-min M]
[--set KEY=VALUE ...]``; ``--set`` changes one setting of the shipped configuration, as
``async-rl-train --set`` does (not the ones the bench fixes itself: the pace, one async
worker, the seeds, the budget and the evaluations), and the JSON lists them under
``settings``. The last line is JSON (``arm_minutes`` to the threshold, ``null`` where it was
not reached; ``arm_minutes_run``, how much arm time the run had). SIGINT or SIGTERM (a session
that ends) stops the run where it is and still prints the summary, with ``stopped_by`` naming
the signal.

A push run takes longer than a session: the run keeps checkpoints with its replay buffer
(every ``checkpoint.interval_steps`` updates, at a stop signal and at its end) in ``--keep``,
and the same command goes on from the newest one (``resumed_from``), every evaluation before
it read back from the run's ``metrics.jsonl`` there; the wall clock to the threshold is then
not reported, the arm time is. A run that finished (threshold reached or budget spent) leaves
its evaluations and JSON in ``--keep``/``results.jsonl``. The same command, or one with
another ``--threshold`` or ``--budget-min`` that run already answers, prints them again
rather than training on; a threshold it did not reach, within a budget it did not spend, goes
on from where it ended (``--fresh``: start over).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import sys
import time
from typing import Any

import _overrides  # beside this script (bench/ is on sys.path)
import _results

HEADER = f'{"env steps":>10}{"arm min":>9}{"success":>9}'


def main() -> None:
    """Train one real-time arm; print each evaluation as it comes, then the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help='2 minutes of arm time: a smoke run, not a figure')
    parser.add_argument('--budget-min', type=float, default=20.0,
                        help='most arm minutes to train')
    parser.add_argument('--eval-every', type=int, default=1000, help='env steps')
    parser.add_argument('--episodes', type=int, default=40, help='per evaluation')
    parser.add_argument('--task', default=None,
                        help='task as async-rl-train --task takes it (default: the config, reach)')
    parser.add_argument('--threshold', type=float, default=0.95,
                        help='success rate that counts as reliable (0.9 for the cube tasks)')
    parser.add_argument('--seed', type=int, default=0)
    _overrides.add_argument(parser)
    parser.add_argument('--keep', default=None,
                        help='folder of the checkpoints of the run, resumed from by the same '
                        'command (default: runs/bench/arm_time_<task>_seed<S>_'
                        '<settings>, none with --quick; "" keeps nothing)')
    parser.add_argument('--fresh', action='store_true',
                        help='start over: forget the checkpoints and the finished result in '
                        '--keep')
    args = parser.parse_args()
    if args.quick:
        args.budget_min, args.episodes = 2.0, 10

    from async_rl_ros.core.config import ConfigError
    from async_rl_ros.core.learning.metrics import MetricsLogger, RECORD
    from async_rl_ros.local.lifecycle import StopRequest
    from async_rl_ros.local.train import LocalRun

    def notice(_: str) -> None:
        print(f'{signalled.signal_name}: the run stops here; its summary follows', flush=True)

    signalled = StopRequest(notify=notice)
    signalled.install()  # before the processes start: a signal at any point ends in a summary

    try:
        given, env_cfg, cfg, rcfg = _configure(args)
    except ConfigError as exc:  # a bad --set: one line naming it, exit 2
        print(f'arm_time.py: {exc}', file=sys.stderr)
        raise SystemExit(2) from None
    hz = env_cfg.task.control_hz
    keep = args.keep if args.keep is not None else (
        '' if args.quick else _default_keep(env_cfg, cfg, args.seed))  # a smoke run: afresh
    cfg = cfg.replace(**{'checkpoint.directory': keep or '/tmp/async_rl_bench_arm_time',
                         'checkpoint.save_replay_buffer': bool(keep)})
    finished = os.path.join(keep, 'results.jsonl') if keep else ''
    if args.fresh and keep:
        for path in [*Path(keep).glob('ckpt_*.pt'), Path(finished), Path(keep) / RECORD]:
            path.unlink(missing_ok=True)
    # A finished run under the same seed, evaluations and settings answers for any threshold
    # and any budget it covered; a larger budget or a threshold it did not reach goes on.
    budget = cfg.total_env_steps
    settings = _results.settings_digest(env_cfg, _any_budget(cfg), rcfg)
    changed = ', '.join(f'{name}={value}' for name, value in given.items())
    ramp = (f', reached at {cfg.max_updates_ramp_steps:,} env steps'
            if cfg.max_updates_ramp_steps else '')
    print(f'{env_cfg.task.name}: one simulated UR5 in real time at {hz:.0f} Hz, learner: '
          f'shipped defaults{f" and {changed}" if changed else ""} '
          f'(max {cfg.max_updates_per_step:g} updates per transition{ramp})', flush=True)
    earlier = _results.find(_results.load(finished), {'settings': settings})  # the latest
    answer = _answer(earlier, args.threshold, budget, hz) if earlier is not None else None
    if answer is not None:  # nothing to train
        signalled.uninstall()
        print(f'finished before, read from {finished} (--fresh runs it again)')
        print(HEADER, *(_row(row, hz) for row in answer[0]), sep='\n')
        _report(answer[1])
        return
    resume = bool(keep) and any(Path(keep).glob('ckpt_*.pt'))
    run = LocalRun(env_cfg, cfg, rcfg, logger=MetricsLogger(), resume=resume)
    resumed_at = run.learner.env_steps if run.resumed is not None else None
    if keep:  # the run's metrics record: a resume reloads it up to the checkpoint
        run.loop.logger.record_to(Path(keep) / RECORD, resumed_at)
    if run.resumed is not None:
        print(f'resumed from {run.resumed.path} at {resumed_at} env steps; '
              f'{run.record_note}', flush=True)
    # [env steps, success rate, wall seconds to the evaluation (None: before a resume)]: every
    # evaluation of the run, those before a resume from its record (the checkpoint keeps only
    # the export candidates), or those of the finished run it goes on from
    rows: list[list] = ([[step, value, None] for step, value
                         in run.loop.logger.history.get('eval/success_rate', [])]
                        if earlier is None else list(earlier['rows']))
    print(HEADER, *(_row(row, hz) for row in rows), sep='\n', flush=True)
    seen, shown = (rows[-1][0] if rows else -1), 0
    start = time.perf_counter()

    def stop() -> bool:
        # Each evaluation is printed as it arrives: a two-hour run shows where it stands.
        nonlocal shown
        for e in run.loop.evaluations[shown:]:
            if e.env_steps > seen:
                wall = None if run.resumed is not None else time.perf_counter() - start
                rows.append([e.env_steps, e.stats.success_rate, wall])
                print(_row(rows[-1], hz), flush=True)
        shown = len(run.loop.evaluations)
        return _first(rows, args.threshold) is not None

    try:
        run.run(should_stop=lambda: stop() or signalled())
        if keep:  # a stopped session loses nothing of the run; a finished one can go further
            run.loop.save_checkpoint()
    finally:
        run.close()
        run.loop.logger.close()
        signalled.uninstall()
    stop()  # the evaluations that arrived after the last check
    learner = run.learner
    updates0, steps0 = learner.ready_at or (learner.updates, learner.env_steps)
    ratio = (learner.updates - updates0) / max(1, learner.env_steps - steps0)
    summary = {'task': env_cfg.task.name, 'threshold': args.threshold,
               **_reached(rows, args.threshold, hz),
               'arm_minutes_run': round(learner.env_steps / hz / 60, 2),
               'updates_per_transition': round(ratio, 3),
               'env_steps': learner.env_steps, 'updates': learner.updates,
               'settings': given,
               'stopped_by': signalled.signal_name,
               'resumed_from': run.resumed.state['counters']['env_steps']
               if run.resumed is not None else None}
    if signalled.signum is None:  # finished: the same command answers from it
        _results.save(finished, {'settings': settings}, {'rows': rows, 'summary': summary})
    _report(summary)
    if signalled.signum is not None:
        raise SystemExit(signalled.exit_code())


def _any_budget(cfg):
    """Return the learner section with the budget left out of what identifies a run."""
    return cfg.replace(total_env_steps=1)


def _row(row: list, hz: float) -> str:
    return f'{row[0]:>10}{row[0] / hz / 60:>9.1f}{row[1]:>9.2f}'


def _first(rows: list[list], threshold: float) -> list | None:
    """Return the first evaluation at ``threshold`` or above, or ``None``."""
    return next((row for row in rows if row[1] >= threshold), None)


def _reached(rows: list[list], threshold: float, hz: float) -> dict:
    """
    Return the arm minutes to ``threshold`` and the wall minutes until it was known.

    The wall clock runs until the evaluator had scored that snapshot (its lag behind the arm
    included); it is unknown (``None``) for a snapshot scored before a resume.
    """
    row = _first(rows, threshold)
    return {'arm_minutes': round(row[0] / hz / 60, 2) if row else None,
            'wall_minutes': round(row[2] / 60, 2) if row and row[2] is not None else None}


def _answer(earlier: dict, threshold: float, budget: int, hz: float
            ) -> tuple[list[list], dict] | None:
    """
    Return the rows and summary a finished run gives for ``threshold`` within ``budget``.

    ``None`` where it cannot say: it stopped, at a lower threshold of its own, before both
    this threshold and the end of this budget (the run then goes on from its end).
    """
    within = [row for row in earlier['rows'] if row[0] <= budget]
    if _first(within, threshold) is None and earlier['summary']['env_steps'] < budget:
        return None
    return within, {**earlier['summary'], 'threshold': threshold,
                    **_reached(within, threshold, hz)}


def _report(summary: dict) -> None:
    """Print the arm time line and the JSON."""
    minutes, wall = summary['arm_minutes'], summary['wall_minutes']
    print(f'arm time to {100 * summary["threshold"]:.0f} %: '
          f'{"not reached" if minutes is None else f"{minutes:.1f} min"}'
          f'{"" if wall is None else f" (known after {wall:.1f} min of wall clock)"}; '
          f'updates per transition sustained'
          f'{"" if summary["resumed_from"] is None else " since the resume"}: '
          f'{summary["updates_per_transition"]:.2f}')
    print(json.dumps(summary), flush=True)


#: What the bench sets itself: a ``--set`` of these is refused, not silently overridden.
_FIXED = {'env_worker': ('sim.real_time', 'seed', 'task.name'),
          'learner': ('total_env_steps', 'eval_every', 'eval_episodes', 'seed'),
          'local_runner': ('mode', 'num_workers')}
_FLAGS = '--task, --seed, --budget-min, --eval-every, --episodes'


def _configure(args: argparse.Namespace) -> tuple[dict, Any, Any, Any]:
    """
    Return the ``--set`` settings (flat, by node) and the env, learner and runner sections.

    :raises ConfigError: a bad ``--set``, or one of a key the bench sets itself.
    """
    from async_rl_ros.envs.tasks import load_sections
    from async_rl_ros.local.cli import default_config_path

    nodes = _overrides.by_node(args.overrides, _FIXED, 'the pace and one async worker are the '
                               f'bench, {_FLAGS}')
    env = {**nodes['env_worker'], 'sim.real_time': True, 'seed': args.seed}
    if args.task:
        env['task.name'] = args.task
    path = default_config_path()
    env_cfg = load_sections(path, {'env_worker': env}, ('env_worker',))['env_worker']
    budget_steps = int(args.budget_min * 60 * env_cfg.task.control_hz)
    learner = {**nodes['learner'], 'total_env_steps': budget_steps,
               'eval_every': args.eval_every, 'eval_episodes': args.episodes, 'seed': args.seed}
    runner = {**nodes['local_runner'], 'mode': 'async', 'num_workers': 1}
    loaded = load_sections(path, {'env_worker': env, 'learner': learner, 'local_runner': runner},
                           ('learner', 'local_runner'))  # over the task's own defaults
    return _overrides.flat(nodes), env_cfg, loaded['learner'], loaded['local_runner']


def _default_keep(env_cfg, cfg, seed: int) -> str:
    """Return the run's checkpoint folder: one per task, seed and settings, for any budget."""
    digest = _results.settings_digest(env_cfg, _any_budget(cfg))
    return _results.default_path('arm_time', env_cfg.task.name, False,
                                 suffix=f'_seed{seed}_{digest}')


if __name__ == '__main__':
    main()
