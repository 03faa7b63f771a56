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

"""The benches still run against the package's API (tiny budgets: smoke tests, not figures)."""

import itertools
import json
import pathlib
import signal
import subprocess
import sys
import threading
from typing import Callable

from conftest import BENCH, load_bench
import pytest

# A module whose name starts with '_' is shared by the benches, not a bench itself.
SCRIPTS = (sorted(p for p in BENCH.glob('*.py') if not p.name.startswith('_'))
           if BENCH.is_dir() else [])

pytestmark = pytest.mark.skipif(not SCRIPTS, reason='bench/ is not beside the package')


@pytest.mark.parametrize('script', SCRIPTS, ids=lambda p: p.stem)
def test_every_bench_has_a_quick_mode(script):
    out = subprocess.run([sys.executable, str(script), '--help'], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert '--quick' in out.stdout


def test_the_arm_loop_s_load_trains_a_learner():
    """The learner that loads the arm-loop bench's loaded runs trains (it once died at once)."""
    out = subprocess.run([sys.executable, str(BENCH / 'arm_loop.py'), '--learner', '1'],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr


def test_sample_efficiency_trains_and_scores_marks(capsys):
    bench = load_bench('sample_efficiency')
    result = bench.run_ours(0, 120, [60, 120])
    assert sorted(result['curve']) == [60, 120]
    assert all(0.0 <= rate <= 1.0 for rate in result['curve'].values())
    # The shipped default evaluates the averaged actor; the online one is scored beside it.
    assert sorted(result['online_curve']) == [60, 120]
    assert result['seconds'][60] <= result['seconds'][120]
    # Each mark is said on stderr as the run goes (stdout ends with the JSON line).
    marks = [line for line in capsys.readouterr().err.splitlines() if 'env steps' in line]
    assert [line.split(' % at ')[1].split()[0] for line in marks] == ['60', '120']
    assert marks[0].startswith('async_rl_ros seed 0: ') and '(online actor ' in marks[0]


class _Stop(Exception):
    """Stands in for the end of a session, in the middle of a run."""


def _watch_marks(bench, monkeypatch) -> tuple[list, dict]:
    """Record the marks the bench says; it stops after the one ``stop['at']`` names."""
    seen, stop = [], {'at': None}
    say = bench._progress

    def progress(impl, seed, at, *rates):
        say(impl, seed, at, *rates)
        seen.append(at)
        if at == stop['at']:
            raise _Stop

    monkeypatch.setattr(bench, '_progress', progress)
    return seen, stop


def _run(key, seed, curve, seconds_per_step=0.01):
    return {'impl': key, 'key': key, 'seed': seed, 'curve': curve,
            'seconds': {m: m * seconds_per_step for m in curve}}


def test_the_summary_counts_steps_to_90_and_compares_with_the_better_baseline():
    """The JSON keys the issues judge by, on made-up curves (no training)."""
    scores = load_bench('_scores')
    marks = (1000, 2000, 3000, 4000)
    ours = [scores.score(_run('ours', s, dict(zip(marks, c)))) for s, c in enumerate([
        (0.5, 0.9, 0.95, 0.925),   # 90 % at 2,000, 95 % at 3,000 and stays above 90 %
        (0.2, 0.6, 0.975, 0.85),   # 90 % and 95 % at 3,000, then drops below 90 %
        (0.1, 0.2, 0.3, 0.4)])]    # never: counted as infinite in the median
    assert [r['steps_to_90'] for r in ours] == [2000, 3000, None]
    assert [r['steps_to_95'] for r in ours] == [3000, 3000, None]
    assert [r['stays_90'] for r in ours] == [True, False, False]
    assert ours[0]['seconds_to_90'] == pytest.approx(20.0)
    sac = [scores.score(_run('sac_her', s, dict(zip(marks, (0.1, 0.2, 0.5, 0.9)))))
           for s in range(3)]
    tqc = [scores.score(_run('tqc_her', s, dict(zip(marks, (0.1, 0.2, 0.3, 0.4)))))
           for s in range(3)]

    class Args:
        task, steps, baseline_steps, seeds = 'reach', 4000, None, [0, 1, 2]

    summary = scores.summarize(ours + sac + tqc, Args, eval_episodes=40)
    assert summary['env_steps_to_90_median'] == 3000 and summary['seeds_reaching_90'] == 2
    assert summary['baseline'] == 'SB3 SAC+HER'
    assert summary['baseline_env_steps_to_90_median'] == 4000
    assert summary['ratio_vs_baseline'] == 0.75
    assert summary['baselines_env_steps_to_90_median'] == {
        'SB3 SAC+HER': 4000, 'TQC+HER': None}
    assert summary['seeds_staying_90'] == 1 and summary['eval_episodes'] == 40
    # Where the baseline stood at twice this learner's median (6,000: its last mark).
    assert summary['baseline_success_at_twice_ours_median'] == 0.9
    alone = scores.summarize(ours, Args, eval_episodes=40)
    assert alone['baseline'] is None and alone['ratio_vs_baseline'] is None


def test_a_run_done_again_replaces_the_earlier_one_in_the_results_file(tmp_path):
    """After ``--fresh`` the run measured last is the one a later invocation reports."""
    results = load_bench('_results')
    path, key = str(tmp_path / 'results.jsonl'), {'impl': 'ours', 'seed': 0}
    results.save(path, key, {'curve': {'1000': 0.5}})
    results.save(path, {'impl': 'ours', 'seed': 1}, {'curve': {'1000': 0.7}})
    results.save(path, key, {'curve': {'1000': 0.9}})
    assert results.find(results.load(path), key) == {'curve': {'1000': 0.9}}
    assert results.find(results.load(path), {'impl': 'sac', 'seed': 0}) is None


def test_finished_runs_are_kept_beside_the_trainers_runs_not_in_tmp():
    """A reboot that empties ``/tmp`` must not lose a long bench's finished seeds."""
    from async_rl_ros.core.sections.learning import LearnerConfig

    results = load_bench('_results')
    path = pathlib.PurePath(results.default_path('arm_time', 'gym:PandaPush-v3', False))
    assert not path.is_absolute()  # under the working directory, as the trainer's run folders
    assert path.parts[0] == pathlib.PurePath(LearnerConfig().log_dir).parts[0]
    assert path.name == 'arm_time_gym_PandaPush-v3.jsonl'


def test_a_stopped_run_goes_on_from_its_last_mark(monkeypatch, tmp_path, capsys):
    """A session that ends mid-run loses the steps since the last mark, not the run."""
    from async_rl_ros.core.learning import single_process

    bench = load_bench('sample_efficiency')
    keep = tmp_path / 'unfinished'
    seen, stop = _watch_marks(bench, monkeypatch)
    stop['at'] = 120
    with pytest.raises(_Stop):
        bench.run_ours(0, 180, [60, 120, 180], keep=str(keep))
    assert [p.name for p in keep.iterdir()] == ['mark_000000000060']  # 120 was not kept
    capsys.readouterr()
    started = []
    make_loop = single_process.single_process_loop

    def loop(learner, env, **kwargs):
        started.append((learner.env_steps, len(learner.replay)))
        return make_loop(learner, env, **kwargs)

    monkeypatch.setattr(single_process, 'single_process_loop', loop)
    seen.clear()
    stop['at'] = None  # the next session runs it to the end
    result = bench.run_ours(0, 180, [60, 120, 180], keep=str(keep))
    assert started == [(60, started[0][1])] and started[0][1] >= 60  # learner and its data
    assert seen == [120, 180] and result['resumed_at'] == [60]
    assert sorted(result['curve']) == sorted(result['online_curve']) == [60, 120, 180]
    assert result['seconds'][60] <= result['seconds'][120] <= result['seconds'][180]
    assert 'resumed at 60 env steps' in capsys.readouterr().err


def test_a_stopped_baseline_goes_on_from_its_last_mark(monkeypatch, tmp_path):
    pytest.importorskip('stable_baselines3')
    bench = load_bench('sample_efficiency')
    keep = tmp_path / 'unfinished'
    loaded = []
    seen, stop = _watch_marks(bench, monkeypatch)
    stop['at'] = 100
    with pytest.raises(_Stop):
        bench.run_baseline('sac_her', 0, 150, [50, 100, 150], keep=str(keep))
    load = bench.load_baseline

    def spy(*args, **kwargs):
        loaded.append(load(*args, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(bench, 'load_baseline', spy)
    seen.clear()
    stop['at'] = None
    result = bench.run_baseline('sac_her', 0, 150, [50, 100, 150], keep=str(keep))
    assert seen == [100, 150] and result['resumed_at'] == [50]
    assert loaded[0].num_timesteps == 150  # went on from 50, not from 0
    assert loaded[0].replay_buffer.size() == 150


def test_what_cannot_be_resumed_is_said_and_run_afresh(tmp_path, capsys):
    bench = load_bench('sample_efficiency')
    unfinished = bench.Unfinished(tmp_path)
    unfinished.save(60, {'curve': {60: 0.5}, 'seconds': {60: 1.0}},
                    lambda folder: (folder / 'ckpt_000000001.pt').write_bytes(b'\0' * 64))
    result = bench.run_ours(0, 60, [60], keep=str(tmp_path))
    assert result['resumed_at'] == [] and sorted(result['curve']) == [60]
    assert 'cannot resume from' in capsys.readouterr().err


def test_a_baseline_leaves_no_log_folders_behind(monkeypatch, tmp_path):
    """SB3 makes an ``SB3-<time>`` folder per ``learn()`` unless it is given a logger."""
    pytest.importorskip('stable_baselines3')
    import tempfile

    bench = load_bench('sample_efficiency')
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    env_cfg = bench._configs(0, 200, 'reach')[0]
    model, _, eval_env = bench.make_baseline('sac_her', 'reach', 0, 200, env_cfg)
    try:
        for _ in range(2):  # one call per evaluation mark
            model.learn(50, reset_num_timesteps=False)
    finally:
        eval_env.close()
        model.get_env().close()
    assert model.num_timesteps == 100
    assert [p.name for p in tmp_path.glob('SB3-*')] == []


@pytest.mark.parametrize('impl', ['sac', 'sac_her'])
def test_a_baseline_trains_with_the_run_s_held_starts_and_is_judged_without_them(impl):
    """``sim.cube_in_gripper`` shapes the baseline's training episodes, as it shapes ours."""
    pytest.importorskip('stable_baselines3')
    from async_rl_ros.envs.manipulation_task import REST_HEIGHT

    bench = load_bench('sample_efficiency')
    env_cfg = bench._configs(0, 200, 'pick_and_place')[0].replace(
        **{'sim.cube_in_gripper': 1.0})
    model, _, eval_env = bench.make_baseline(impl, 'pick_and_place', 0, 200, env_cfg)

    def held(env):
        env.reset(seed=3)
        flat = getattr(env.unwrapped, 'env', env.unwrapped)   # under the goal-dict view
        return bool(flat.backend.cell().cube[2] > REST_HEIGHT + 0.02)

    try:
        assert held(model.get_env().get_attr('unwrapped')[0])
        assert not held(eval_env)
    finally:
        eval_env.close()
        model.get_env().close()


@pytest.mark.parametrize('rate, steps', [(None, 40), (25.0, 100)])
def test_a_baseline_acts_at_the_run_s_rate_with_its_time_limit(rate, steps):
    """pick_and_place's own 10 Hz, or the 25 Hz a run sets back: the baseline's env follows."""
    bench = load_bench('sample_efficiency')
    baselines = load_bench('_baselines')
    env_cfg = bench._configs(0, 200, 'pick_and_place')[0]
    if rate is not None:
        env_cfg = env_cfg.replace(**{'task.control_hz': rate})
    env = baselines.baseline_env('pick_and_place', env_cfg)
    try:
        assert env.unwrapped.env.cfg.task.control_hz == env_cfg.task.control_hz
        assert env.spec.max_episode_steps == env_cfg.task.max_episode_steps == steps
    finally:
        env.close()


def test_a_finished_run_is_reused_only_under_the_settings_it_measured(monkeypatch):
    """A default changed since (here the reach action) runs the job again."""
    bench = load_bench('sample_efficiency')
    job = ('ours', 0, 1000, [500, 1000], 'reach')
    baseline = ('sac_her', 0, 1000, [500, 1000], 'reach')
    shipped, shipped_baseline = bench._job_key(job, 500), bench._job_key(baseline, 500)
    assert shipped == bench._job_key(job, 500)
    configs = bench._configs

    def joint_actions(seed, steps, task):
        env_cfg, cfg = configs(seed, steps, task)
        return env_cfg.replace(**{'task.action': 'joint'}), cfg

    monkeypatch.setattr(bench, '_configs', joint_actions)
    bench._settings.cache_clear()
    assert bench._job_key(job, 500)['settings'] != shipped['settings']
    # A baseline brings its own learner: a learner setting does not run it again.

    def other_learner(seed, steps, task):
        env_cfg, cfg = configs(seed, steps, task)
        return env_cfg, cfg.replace(**{'sac.gamma': 0.9})

    monkeypatch.setattr(bench, '_configs', other_learner)
    bench._settings.cache_clear()
    assert bench._job_key(baseline, 500) == shipped_baseline
    assert bench._job_key(job, 500)['settings'] != shipped['settings']


def _arm_time_until(stop_at: str | Callable[[list[str]], bool], *args: str) -> list[str]:
    """
    Run ``arm_time.py --quick``, send SIGTERM once ``stop_at`` holds, return its stdout lines.

    :param stop_at: a line start, or a test of the lines read so far.
    """
    if isinstance(stop_at, str):
        line_start = stop_at
        stop_at = lambda lines: lines[-1].startswith(line_start)  # noqa: E731
    proc = subprocess.Popen([sys.executable, str(BENCH / 'arm_time.py'), '--quick', *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    guard = threading.Timer(600, proc.kill)  # a hang guard, not a figure
    guard.start()
    try:
        # One reader to the end: what it buffered past the stop line is not lost.
        lines: list[str] = []
        sent = False
        for line in proc.stdout:
            lines.append(line.rstrip('\n'))
            if not sent and stop_at(lines):
                proc.send_signal(signal.SIGTERM)
                sent = True
        proc.wait()
    finally:
        guard.cancel()
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, lines
    return lines


def test_a_stopped_arm_time_run_still_reports_what_it_measured_and_goes_on(tmp_path):
    # A session that ends sends SIGTERM: the arm time run so far is still a figure...
    keep = tmp_path / 'keep'
    lines = _arm_time_until(f'{"env steps":>10}', '--keep', str(keep))  # the column header
    assert any(line.startswith('SIGTERM: the run stops here') for line in lines), lines
    summary = json.loads(lines[-1])
    assert summary['stopped_by'] == 'SIGTERM' and summary['resumed_from'] is None
    assert summary['arm_minutes'] is None and summary['arm_minutes_run'] >= 0
    assert summary['task'] == 'reach' and summary['env_steps'] >= 0
    # ... and the same command goes on from where it stopped, replay buffer and all.
    lines = _arm_time_until('resumed from ', '--keep', str(keep))
    assert any(line.startswith('resumed from ') for line in lines), lines
    assert json.loads(lines[-1])['resumed_from'] == summary['env_steps']


def test_a_resumed_arm_time_run_lists_every_evaluation_before_the_stop(tmp_path):
    # The checkpoint keeps only the export candidates (3); the table and results of a run that
    # went on across sessions must still show its whole course.
    args = ('--eval-every', '20', '--keep', str(tmp_path / 'keep'))
    header = f'{"env steps":>10}'

    def rows(lines: list[str]) -> list[tuple[int, str]]:
        at = next((i + 1 for i, line in enumerate(lines) if line.startswith(header)),
                  len(lines))
        table = itertools.takewhile(lambda line: line[:10].strip().isdigit(), lines[at:])
        return [(int(line.split()[0]), line.split()[2]) for line in table]

    first = rows(_arm_time_until(lambda lines: len(rows(lines)) >= 5, *args))
    assert len(first) >= 5, first
    assert rows(_arm_time_until(header, *args))[:len(first)] == first


def test_a_finished_arm_time_run_is_reported_again_and_a_larger_budget_goes_on(tmp_path):
    keep = str(tmp_path / 'keep')

    def arm_time(*args: str) -> tuple[list[str], dict]:
        proc = subprocess.run([sys.executable, str(BENCH / 'arm_time.py'), '--eval-every',
                               '1000', '--episodes', '1', '--keep', keep, *args],
                              capture_output=True, text=True, timeout=600)  # a hang guard
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        return lines, json.loads(lines[-1])

    lines, first = arm_time('--budget-min', '0.05')  # 75 env steps at reach's 25 Hz
    assert first['stopped_by'] is None and first['resumed_from'] is None
    # The same command does not train on from the run's end: it says what that run measured.
    lines, again = arm_time('--budget-min', '0.05')
    assert any(line.startswith('finished before, read from ') for line in lines), lines
    assert again == first
    # A larger budget goes on from where the finished run ended, not from an older checkpoint.
    lines, further = arm_time('--budget-min', '0.1')
    assert further['resumed_from'] == first['env_steps'], lines
    assert further['env_steps'] > first['env_steps']
    # --fresh starts over.
    lines, fresh = arm_time('--budget-min', '0.05', '--fresh')
    assert fresh['resumed_from'] is None and not any('finished before' in x for x in lines)


def test_a_finished_arm_time_run_answers_the_thresholds_and_budgets_it_covered():
    bench = load_bench('arm_time')
    hz = 10.0  # 600 env steps an arm minute
    rows = [[600, 0.5, 60.0], [1200, 0.85, 125.0], [1800, 0.95, 190.0]]
    earlier = {'rows': rows, 'summary': {
        'threshold': 0.9, 'arm_minutes': 3.0, 'wall_minutes': 3.17, 'env_steps': 1850}}
    kept, summary = bench._answer(earlier, 0.8, budget=3000, hz=hz)  # a lower threshold
    assert kept == rows and summary['threshold'] == 0.8
    assert (summary['arm_minutes'], summary['wall_minutes']) == (2.0, 2.08)
    # A budget that ends before the first 80 %, which that run spent: not reached.
    kept, summary = bench._answer(earlier, 0.8, budget=1000, hz=hz)
    assert kept == rows[:1] and summary['arm_minutes'] is None
    # A threshold it never reached, with budget left: the run goes on from its end.
    assert bench._answer(earlier, 0.99, budget=3000, hz=hz) is None
    # Evaluations scored before a resume have no wall clock.
    rows[1][2] = None
    assert bench._answer(earlier, 0.8, budget=3000, hz=hz)[1]['wall_minutes'] is None


def test_arm_time_trains_with_a_set_and_refuses_what_the_bench_fixes():
    # A --set reaches the configuration the run is built from, and the JSON names it...
    lines = _arm_time_until('reach: one simulated UR5', '--set',
                            'learner.max_updates_per_step=3', '--set',
                            'learner.max_updates_ramp_steps=5000')
    banner = next(line for line in lines if line.startswith('reach: one simulated UR5'))
    assert banner.rstrip().endswith(
        'shipped defaults and learner.max_updates_per_step=3, '
        'learner.max_updates_ramp_steps=5000 (max 3 updates per transition, reached at 5,000 '
        'env steps)')
    assert json.loads(lines[-1])['settings'] == {'learner.max_updates_per_step': 3,
                                                 'learner.max_updates_ramp_steps': 5000}
    # ... while a key the bench sets itself is refused in one line, before anything starts,
    # rather than quietly overridden.
    for key in ('learner.seed=3', 'env_worker.sim.real_time=false', 'local_runner.num_workers=2'):
        proc = subprocess.run([sys.executable, str(BENCH / 'arm_time.py'), '--quick', '--set',
                               key], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and proc.stdout == '', proc
        assert proc.stderr.startswith(f"arm_time.py: --set = '{key.partition('=')[0]}' is not "
                                      'allowed (a key the bench does not set itself'), proc
        assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_time_to_success_drives_the_local_runner():
    bench = load_bench('time_to_success')
    snapshots, rates = bench.run_runner('async', 1, budget_s=3.0, snapshot_s=1.0)
    assert isinstance(snapshots, list)   # warm-up lasts longer than 3 s: no update, no snapshot
    assert set(rates) == {'updates_per_s', 'env_steps_per_s'} and min(rates.values()) >= 0
    reached, curve = bench.time_to([], 0.95, 1, lambda policy: policy)
    assert reached is None and curve == []


def test_time_to_success_keeps_each_finished_setting(monkeypatch, tmp_path, capsys):
    """A second invocation reuses what the first finished; another target trains again."""
    import json

    bench = load_bench('time_to_success')
    trained = []

    def train(name):
        def run(*args, **kwargs):
            trained.append(name)
            return [(10.0, name)], {'updates_per_s': 5.0, 'env_steps_per_s': 7.0}
        return run

    monkeypatch.setattr(bench, 'run_runner', lambda mode, *a, **k: train(mode)())
    monkeypatch.setattr(bench, 'run_sb3', train('sb3'))
    # Scored without an env: the async snapshot reaches the target, the others do not.
    monkeypatch.setattr(bench, 'time_to', lambda snapshots, target, *a: (
        (10.0, [(10.0, 1.0)]) if snapshots[0][1] == 'async' else (None, [(10.0, 0.0)])))
    results = tmp_path / 'tts.jsonl'

    def main(*extra):
        monkeypatch.setattr(sys, 'argv', ['time_to_success.py', '--budget-s', '30',
                                          '--results', str(results), *extra])
        bench.main()
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    first = main()
    assert trained == ['async', 'sync', 'sb3'] and len(results.read_text().splitlines()) == 3
    assert first['async_s'] == 10.0 and first['sync_s'] is None
    assert main() == first and trained == ['async', 'sync', 'sb3']   # nothing trained again
    main('--target', '0.5')
    assert trained[3:] == ['async', 'sync', 'sb3']
    main('--fresh')
    assert trained[6:] == ['async', 'sync', 'sb3']


def test_time_to_success_sets_async_and_sync_alike_and_refuses_what_it_fixes(
        monkeypatch, tmp_path, capsys):
    """A --set reaches both of our runs and their keys; the baseline takes the env's only."""
    bench = load_bench('time_to_success')
    trained = []

    def run_runner(mode, workers, budget_s, snapshot_s, seed, task, nodes):
        cfg = bench._configs(10**9, seed, task, nodes)[1]
        trained.append((mode, cfg.max_updates_ramp_steps, cfg.seed, cfg.batch.initial_batch))
        return [(10.0, mode)], {'updates_per_s': 5.0, 'env_steps_per_s': 7.0}

    def run_sb3(budget_s, snapshot_s, seed, task, baseline, nodes):
        env_cfg = bench._configs(10**9, seed, task, nodes)[0]  # the env our runs step
        trained.append(('sb3', env_cfg.task.max_episode_steps))
        return [(10.0, 'sb3')], {'updates_per_s': 1.0, 'env_steps_per_s': 1.0}

    monkeypatch.setattr(bench, 'run_runner', run_runner)
    monkeypatch.setattr(bench, 'run_sb3', run_sb3)
    monkeypatch.setattr(bench, 'time_to', lambda *a: (None, [(10.0, 0.0)]))
    results = tmp_path / 'tts.jsonl'

    def main(*extra):
        monkeypatch.setattr(sys, 'argv', ['time_to_success.py', '--budget-s', '30', '--seed',
                                          '3', '--results', str(results), *extra])
        bench.main()
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    shipped = bench._configs(10**9, 3)[1].max_updates_ramp_steps
    assert main()['settings'] == {}
    task = bench._configs(10**9, 3)[0].task
    assert trained == [('async', shipped, 3, 256), ('sync', shipped, 3, 256),
                       ('sb3', task.max_episode_steps)]
    ramped = main('--set', 'learner.max_updates_ramp_steps=700')
    assert ramped['settings'] == {'learner.max_updates_ramp_steps': 700}
    # Our two runs again under the setting (a result of the shipped one does not answer);
    # the baseline brings its own learner, so its result is read back...
    assert trained[3:] == [('async', 700, 3, 256), ('sync', 700, 3, 256)]
    # ... but it trains on the env our runs step, an env setting included.
    main('--set', f'task.episode_seconds={2 * task.episode_seconds}')
    assert trained[5:] == [('async', shipped, 3, 256), ('sync', shipped, 3, 256),
                           ('sb3', 2 * task.max_episode_steps)]
    for key in ('learner.seed=1', 'learner.batch.initial_batch=64', 'local_runner.mode=single'):
        proc = subprocess.run([sys.executable, str(BENCH / 'time_to_success.py'), '--quick',
                               '--results', '', '--set', key], capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 2 and proc.stdout == '', proc
        assert proc.stderr.startswith(f"time_to_success.py: --set = '{key.partition('=')[0]}' "
                                      'is not allowed (a key the bench does not set'), proc
        assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_batch_lag_measures_what_the_learner_receives():
    bench = load_bench('batch_lag')
    row = bench.measure(commit_every=1, max_batch_lag=4, seconds=1.0)
    assert row['messages_per_s'] > 0 and row['updates_per_s'] > 0
    assert 0 < row['transitions_per_message'] <= 64
    assert row['lag_mean'] <= row['lag_p99'] <= row['lag_max']
