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
Sample efficiency on one task: this learner vs SB3 SAC + HER and sb3-contrib TQC + HER.

``--task`` picks the task as ``async-rl-train --task`` does: ``reach`` (the simulated UR5
reach task, the default), ``gym:PandaReach-v3``, ``gym:PandaPush-v3``... Every run trains
single-process, for the same number of env steps, with the same seeds; runs go ``--jobs`` at
a time, one per core, with one torch thread each, so they share the machine alike.

* This learner runs ``single_process_loop`` with the shipped learner defaults
  (``config/train.yaml``, its ``env_worker`` section with ``task.name`` set) and the task's
  goal spec (hindsight relabeling).
* The baselines train on the task as Gymnasium offers it: ``gymnasium.make(ID)`` for
  ``gym:ID``, ``gymnasium.make('async_rl_ros/UR5Reach-v0')`` (the goal-conditioned view, with
  the shipped ``env_worker`` settings) for ``reach``; with ``HerReplayBuffer`` and
  rl-baselines3-zoo's tuned panda-gym hyperparameters (``ZOO`` in ``bench/_baselines.py``).

Every ``--eval-every`` env steps the deterministic policy is evaluated on the same 40
episodes (episode ``k`` reset with seed ``1,000,000 + k``: the same starts and goals for every
learner; with 20, a policy that succeeds 95 % of the time scores below 90 % at one mark in
13, so "stays >= 90 %" would judge the evaluation's noise; with 40, one in 21). For this
learner that is the policy its evaluator scores: the averaged actor when
``sac.policy_average_tau > 0``, and then the online actor too, in a row of its own (a run
chooses its export among both). Reported
per run: the success rate at those marks, the env steps (and training seconds, evaluations
excluded) to the first mark at >= 90 % and at >= 95 %, and whether every mark from the first
95 % on stays >= 90 %.

Each finished run is appended to ``--results`` (JSON lines); a later invocation with the same
task, budget, marks and evaluation reuses it instead of running it again (``--fresh``: run
everything again). A run in progress keeps itself at every mark beside that file
(``bench/_unfinished.py``: a push run takes longer than many sessions last); a later
invocation resumes it from its newest mark, and its result lists the marks it was resumed at.

Usage: ``python bench/sample_efficiency.py [--quick] [--task NAME] [--steps N]
[--baseline-steps N] [--seeds 0 1 2] [--only ours|sac_her|tqc_her|sac]``; the last line is a
JSON summary (``ratio_vs_baseline``: this learner's median env steps to 90 % over the better
baseline's, lower is better; ``null`` where either did not get there).
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing as mp
import sys
import time

from _baselines import load_baseline, make_baseline, save_baseline  # beside this script
import _results
from _scores import BASELINES, IMPLS, NAMES, print_table, score, summarize
from _unfinished import Unfinished

EVAL_SEED = 1_000_000
EVAL_EPISODES = 40


def _configs(seed: int, steps: int, task: str):
    from async_rl_ros.envs.tasks import load_sections
    from async_rl_ros.local.cli import default_config_path
    learner = {'seed': seed, 'total_env_steps': steps, 'checkpoint.interval_steps': 0,
               'checkpoint.directory': f'/tmp/async_rl_bench_ckpt_{seed}'}
    loaded = load_sections(default_config_path(), {'env_worker': {'task.name': task},
                                                   'learner': learner},
                           ('env_worker', 'learner'))  # over the task's own defaults
    return loaded['env_worker'], loaded['learner']


def _success(env, act, rank=None) -> float:
    from async_rl_ros.core.learning.evaluation import run_episodes
    kwargs = {'rank': rank} if rank is not None else {}
    return run_episodes(env, act, EVAL_EPISODES, seed=EVAL_SEED, **kwargs).success_rate


class _Clock:
    """Training seconds, evaluations (and keeping the run at its marks) excluded."""

    def __init__(self, already: float = 0.0):
        """:param already: training seconds of the run before it was resumed."""
        self.start = time.perf_counter() - already
        self.paused = 0.0

    def evaluate(self, fn):
        t = time.perf_counter()
        value = fn()
        self.paused += time.perf_counter() - t
        return value

    def seconds(self) -> float:
        return time.perf_counter() - self.start - self.paused


def _resume(impl: str, seed: int, unfinished: Unfinished, restore) -> dict:
    """
    Go on from the run's newest kept mark: ``restore(folder)``, then return its record.

    :returns: ``curve``, ``online_curve``, ``seconds`` (by mark) and ``resumed_at``; empty
        when nothing was kept, or when what was kept cannot be restored (said, then removed).
    """
    record = {'curve': {}, 'online_curve': {}, 'seconds': {}, 'resumed_at': []}
    found = unfinished.newest()
    if found is None:
        return record
    folder, saved = found
    try:
        saved = _decode(saved)
        last = max(saved['curve'])
        restore(folder)
    except Exception as exc:  # noqa: B902 -- whatever is wrong with it, start the run afresh
        print(f'{NAMES[impl]} seed {seed}: cannot resume from {folder} ({type(exc).__name__}: '
              f'{exc}); starting afresh', file=sys.stderr, flush=True)
        unfinished.clear()
        return record
    saved['resumed_at'] = [*saved.get('resumed_at', []), last]
    print(f'{NAMES[impl]} seed {seed}: resumed at {last} env steps from {folder}',
          file=sys.stderr, flush=True)
    return {**record, **saved}


def run_ours(seed: int, steps: int, marks: list[int], task: str = 'reach',
             keep: str | None = None) -> dict:
    """
    Train this project's learner (shipped defaults, hindsight relabeling) on ``task``.

    :param keep: folder of the unfinished run (``_unfinished``): the run resumes from its
        newest mark and keeps itself there at every mark (its checkpoint with the replay
        buffer); ``None``: nothing is kept.
    """
    import torch

    from async_rl_ros.core.learning.checkpoint import CheckpointManager
    from async_rl_ros.core.learning.learner import Learner
    from async_rl_ros.core.learning.resume import check_finite, load_newest, restore_learner
    from async_rl_ros.core.learning.single_process import single_process_loop
    from async_rl_ros.envs.factory import build_env, evaluation_env

    torch.set_num_threads(1)
    env_cfg, cfg = _configs(seed, steps, task)
    env, spec = build_env(env_cfg, training=True)
    eval_env, _ = evaluation_env(env_cfg)
    learner = Learner(cfg, spec.obs_dim, spec.act_dim, goal_spec=spec.goal)
    unfinished = Unfinished(keep)
    record = _resume('ours', seed, unfinished, lambda folder: load_newest(
        CheckpointManager(folder), check=check_finite,
        use=lambda path, state: restore_learner(learner, state, path)))
    curve, online, seconds = record['curve'], record['online_curve'], record['seconds']
    clock = _Clock(max(seconds.values(), default=0.0))

    def scripted(policy):
        return lambda obs: policy(torch.as_tensor(obs, dtype=torch.float32)).detach().numpy()

    def write(folder):
        CheckpointManager(folder, keep_last=1).save(learner.state_dict(), learner.updates,
                                                    replay_buffer=learner.replay)

    loop = single_process_loop(learner, env)
    loop.maybe_publish()
    try:
        for mark in (m for m in marks if m not in curve):
            while learner.env_steps < mark:
                loop.step()
            seconds[mark] = clock.seconds()
            # What the evaluator scores and the run exports (the averaged actor when
            # averaging is on); the online actor too then, to show what the averaging changes.
            evaluated = scripted(learner.export_policy(evaluated=True))
            curve[mark] = clock.evaluate(lambda: _success(eval_env, evaluated, spec.rank))
            if learner.sac.actor_average is not None:
                current = scripted(learner.export_policy())
                online[mark] = clock.evaluate(lambda: _success(eval_env, current, spec.rank))
            _progress('ours', seed, mark, curve[mark], online.get(mark))
            if mark < marks[-1]:
                clock.evaluate(lambda: unfinished.save(mark, record, write))
    finally:
        env.close()
        eval_env.close()
    return {'impl': 'async_rl_ros', 'seed': seed, 'curve': curve, 'online_curve': online,
            'seconds': seconds, 'resumed_at': record['resumed_at'],
            'steps_per_s': steps / max(clock.seconds(), 1e-9),
            'updates_per_s': learner.updates / max(clock.seconds(), 1e-9)}


def run_baseline(impl: str, seed: int, steps: int, marks: list[int], task: str = 'reach',
                 device: str = 'cpu', keep: str | None = None) -> dict:
    """
    Train one baseline (see :func:`make_baseline`) and score it at ``marks``.

    :param keep: as for :func:`run_ours` (the model, its replay buffer and normaliser).
    """
    import torch

    torch.set_num_threads(1)
    model, normalize, eval_env = make_baseline(impl, task, seed, steps,
                                               _configs(seed, steps, task)[0], device)

    def restore(folder):
        nonlocal model
        model = load_baseline(model, normalize, folder, device)

    unfinished = Unfinished(keep)
    record = _resume(impl, seed, unfinished, restore)
    curve, seconds = record['curve'], record['seconds']
    clock = _Clock(max(seconds.values(), default=0.0))
    done = max(curve, default=0)

    def act(obs):
        if normalize is not None:
            obs = normalize.normalize_obs(obs)
        return model.predict(obs, deterministic=True)[0]

    try:
        for mark in (m for m in marks if m not in curve):
            model.learn(mark - done, reset_num_timesteps=False)
            done = mark
            seconds[mark] = clock.seconds()
            curve[mark] = clock.evaluate(lambda: _success(eval_env, act))
            _progress(impl, seed, mark, curve[mark])
            if mark < marks[-1]:
                clock.evaluate(lambda: unfinished.save(
                    mark, record, lambda folder: save_baseline(model, normalize, folder)))
    finally:
        eval_env.close()
        model.get_env().close()
    updates = getattr(model, '_n_updates', 0)
    return {'impl': NAMES[impl], 'key': impl, 'seed': seed, 'curve': curve, 'seconds': seconds,
            'resumed_at': record['resumed_at'],
            'steps_per_s': steps / max(clock.seconds(), 1e-9),
            'updates_per_s': updates / max(clock.seconds(), 1e-9)}


def _progress(impl: str, seed: int, mark: int, rate: float, online: float | None = None
              ) -> None:
    """Say on stderr where a run stands (an hour-long run shows its marks as it goes)."""
    extra = f' (online actor {100 * online:.1f} %)' if online is not None else ''
    print(f'{NAMES[impl]} seed {seed}: {100 * rate:.1f} % at {mark} env steps{extra}',
          file=sys.stderr, flush=True)


def _job(job: tuple, device: str = 'cpu', results: str = '', eval_every: int = 0
         ) -> tuple[tuple, dict]:
    """Run one job, resuming it from its unfinished folder beside ``results`` if it has one."""
    impl, seed, steps, marks, task = job
    keep = _keep(job, results, eval_every)
    if impl == 'ours':
        result = run_ours(seed, steps, marks, task, keep)
    else:
        result = run_baseline(impl, seed, steps, marks, task, device, keep)
    result['key'] = impl
    return job, score(result)


# ---------------------------------------------------------------------- results file
def _job_key(job: tuple, eval_every: int) -> dict:
    impl, seed, steps, marks, task = job
    return {'impl': impl, 'task': task, 'seed': seed, 'steps': steps, 'marks': marks,
            'eval_every': eval_every, 'eval_episodes': EVAL_EPISODES, 'eval_seed': EVAL_SEED,
            'settings': _settings(task, impl == 'ours')}


@functools.lru_cache(maxsize=None)
def _settings(task: str, learner: bool) -> str:
    """
    Return a digest of the shipped settings a run of ``task`` trains with.

    :param learner: include the learner section (this learner's runs; the baselines bring
        their own and see only the env).
    """
    env_cfg, cfg = _configs(0, 1, task)  # the seed and budget are keys of their own
    return _results.settings_digest(env_cfg, cfg if learner else None)


def _keep(job: tuple, results: str, eval_every: int) -> str | None:
    """Return the folder that keeps ``job`` while it is unfinished (``None``: no results file)."""
    return _results.unfinished_folder(results, _job_key(job, eval_every))


def _decode(result: dict) -> dict:
    for name in ('curve', 'online_curve', 'seconds'):  # JSON keys are strings
        if name in result:
            result[name] = {int(k): v for k, v in result[name].items()}
    return result


def main() -> None:
    """Run every (implementation, seed) pair not in the results file; print tables and JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: 2,000 steps, one seed, marks every 1,000')
    parser.add_argument('--task', default='reach',
                        help='task name as async-rl-train --task takes it (reach, gym:ID)')
    parser.add_argument('--steps', type=int, default=50_000, help='env steps per run')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2, 3, 4])
    parser.add_argument('--baseline-steps', '--sb3-steps', type=int, default=None,
                        dest='baseline_steps',
                        help='env steps per baseline run (default: --steps)')
    parser.add_argument('--eval-every', type=int, default=2500, help='env steps between marks')
    parser.add_argument('--jobs', type=int, default=2, help='runs in parallel')
    parser.add_argument('--only', choices=IMPLS, nargs='+', default=None,
                        help='run these only (default: ours, sac_her, tqc_her; sac is SB3 SAC '
                        'with its defaults and no HER on the flat env)')
    parser.add_argument('--results', default=None,
                        help='JSON-lines file of finished runs, reused by later invocations '
                        '(default: runs/bench/sample_efficiency_<task>.jsonl; "" for '
                        'none)')
    parser.add_argument('--baseline-device', default='cpu',
                        help="torch device of the baselines (cpu, cuda, auto); the zoo's "
                        'her-defaults networks (3 x 512, batch 2048) are slow on a CPU')
    parser.add_argument('--fresh', action='store_true',
                        help='run every job again, even those in the results file or kept '
                        'unfinished')
    args = parser.parse_args()
    if args.quick:
        args.steps, args.baseline_steps, args.seeds, args.eval_every = 2000, None, [0], 1000
    if args.results is None:
        args.results = _results.default_path('sample_efficiency', args.task, args.quick)
    from async_rl_ros.core.config import EnvWorkerConfig
    from async_rl_ros.envs.tasks import resolve_task
    resolve_task(EnvWorkerConfig().replace(**{'task.name': args.task}))  # fail before runs
    impls = args.only or ['ours', *BASELINES]
    budgets = {impl: args.steps if impl == 'ours' else (args.baseline_steps or args.steps)
               for impl in impls}
    marks = list(range(args.eval_every, max(budgets.values()) + 1, args.eval_every))
    # Longest runs first, so that the pool's last round is not one long run on one core.
    jobs = sorted(((impl, seed, budgets[impl], [m for m in marks if m <= budgets[impl]],
                    args.task) for impl in impls for seed in args.seeds),
                  key=lambda job: -job[2])
    stored = [] if args.fresh else _results.load(args.results, _decode)
    results, todo = [], []
    for job in jobs:
        found = _results.find(stored, _job_key(job, args.eval_every))
        if found is not None:
            results.append(found)
        else:
            todo.append(job)
    if results:
        print(f'{len(results)} of {len(jobs)} runs read from {args.results}', flush=True)
    if todo:
        if args.fresh:  # and nothing resumed either
            for job in todo:
                Unfinished(_keep(job, args.results, args.eval_every)).clear()
        with mp.get_context('spawn').Pool(min(args.jobs, len(todo))) as pool:
            run = functools.partial(_job, device=args.baseline_device, results=args.results,
                                    eval_every=args.eval_every)
            for job, r in pool.imap_unordered(run, todo, chunksize=1):  # saved as they end
                _results.save(args.results, _job_key(job, args.eval_every), r)
                Unfinished(_keep(job, args.results, args.eval_every)).clear()
                results.append(r)
                print(f'[{len(results)}/{len(jobs)}] {r["impl"]} seed {r["seed"]}: to 90 % '
                      f'{r["steps_to_90"]}, to 95 % {r["steps_to_95"]}, stays >= 90 %: '
                      f'{r["stays_90"]}, curve '
                      + ' '.join(f'{r["curve"][m]:.2f}' for m in sorted(r['curve'])),
                      flush=True)
    results.sort(key=lambda r: (IMPLS.index(r['key']), r['seed']))
    print_table(results, marks, args, EVAL_EPISODES)
    print(json.dumps(summarize(results, args, EVAL_EPISODES)))


if __name__ == '__main__':
    main()
