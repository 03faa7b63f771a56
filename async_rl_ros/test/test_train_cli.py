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
``async-rl-train`` trains SAC and leaves every artifact a run should leave behind.

However the run ends: finished, SIGINT or SIGTERM (through a pipe whose reader is gone too),
a diverged training; SIGKILL leaves no worker process behind; bad input is one line, exit 2.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch
import yaml

TINY = ['--set', 'learner.sac.hidden_sizes=[32, 32]', '--set', 'learner.batch.initial_batch=64',
        '--set', 'learner.batch.min_batch=8', '--set', 'learner.learning_starts=100',
        '--set', 'learner.warmup_steps=100', '--set', 'learner.eval_every=0',
        '--set', 'learner.replay.capacity=20000', '--set', 'learner.final_eval_episodes=2']


posix = pytest.mark.skipif(sys.platform == 'win32', reason='POSIX signals')


def run_cli(tmp_path, *args, **kwargs):
    cmd = [sys.executable, '-m', 'async_rl_ros.local.cli', *TINY,
           '--set', f'learner.log_dir={tmp_path}/run',
           '--set', f'learner.checkpoint.directory={tmp_path}/run/ckpt', *args]
    env = dict(os.environ, OMP_NUM_THREADS='1')
    kwargs.setdefault('stdout', subprocess.PIPE)
    kwargs.setdefault('stderr', subprocess.PIPE)
    return subprocess.Popen(cmd, text=True, env=env, **kwargs)


def wait_for_training(proc, children=0, timeout=300):
    """Read stderr until a progress line shows env steps; return the child processes."""
    deadline = time.monotonic() + timeout
    for line in proc.stderr:  # a pipe: plain progress lines
        match = re.match(r'\w+: (\d+)/', line)
        if match and int(match.group(1)) > 0:
            break
        assert time.monotonic() < deadline, 'training did not start'
    found = psutil.Process(proc.pid).children(recursive=True)
    while len(found) < children and time.monotonic() < deadline:
        time.sleep(0.2)
        found = psutil.Process(proc.pid).children(recursive=True)
    assert len(found) >= children, found
    return found


def assert_saved(tmp_path, start_mtime=0.0):
    run = tmp_path / 'run'
    checkpoints = sorted((run / 'ckpt').glob('ckpt_*.pt'))
    assert checkpoints, 'no final checkpoint'
    assert checkpoints[-1].stat().st_mtime >= start_mtime
    state = torch.load(checkpoints[-1], weights_only=False)
    assert state['counters']['env_steps'] > 0
    policy = run / 'latest' / 'policy.pt'  # the run's own folder
    assert torch.jit.load(str(policy))(torch.zeros(21)).shape == (3,)
    return state


def assert_gone(processes, timeout=30.0):
    gone, alive = psutil.wait_procs(processes, timeout=timeout)
    left = [p.pid for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    for p in alive:
        p.kill()
    assert not left, f'processes outlived the trainer: {left}'


def event_tags(path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(path))
    events.Reload()
    return set(events.Tags()['scalars'])


def test_training_writes_checkpoint_policy_curve_and_tensorboard(tmp_path):
    """The default command trains asynchronously with worker processes."""
    proc = run_cli(tmp_path, '--steps', '400', '--workers', '1')
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    run = tmp_path / 'run' / 'latest'
    assert 'SAC async' in out and 'held-out success rate' in out
    assert 'held-out env steps/s' not in out  # the evaluation's own rate is not the run's
    assert re.search(r'^outcome\s+finished$', out, re.MULTILINE), out
    # The exported policy is judged on learner.final_eval_episodes held-out episodes.
    assert re.search(r'^held-out episodes\s+2$', out, re.MULTILINE), out
    # stderr is a pipe, not a terminal: plain progress lines, no carriage returns.
    lines = re.findall(r'^async: (\d+)/400 steps', err, re.MULTILINE)
    assert len(lines) >= 2 and int(lines[-1]) >= 400, err
    assert '\r' not in err
    assert list((tmp_path / 'run' / 'ckpt').glob('ckpt_*.pt'))
    assert (run / 'learning_curve.png').stat().st_size > 10_000
    events = list((run / 'tensorboard').glob('events.out.tfevents.*'))
    assert events
    tags = event_tags(events[0])
    for tag in ('losses/qf1_loss', 'losses/actor_loss', 'charts/samples_per_s',
                'charts/transition_lag_p50', 'workers/0/steps_per_s', 'charts/episodic_return'):
        assert tag in tags, tag
    policy = torch.jit.load(str(run / 'policy.pt'))
    action = policy(torch.zeros(21))
    assert action.shape == (3,) and bool((action.abs() <= 1).all())
    # Without ROS, the exported policy plays back on the held-out episodes that judged it, in
    # its run's task and configuration: the same figures.
    played = run_cli(tmp_path, '--policy', str(run / 'policy.pt'), '--episodes', '2')
    again, err = played.communicate(timeout=300)
    assert played.returncode == 0, err
    assert f"config: {run / 'config.yaml'}" in again, again
    assert re.search(r'^play it back\s+async-rl-train --policy \S+/policy.pt --render$', out,
                     re.MULTILINE), out  # what the training run's table says
    for name in ('episodes', 'success rate', 'mean final distance', 'mean return'):
        assert table_value(again, name) == table_value(out, f'held-out {name}'), (out, again)


def table_value(out, name):
    """Return the value of a row of a printed table."""
    match = re.search(rf'^{name}\s+(\S+)', out, re.MULTILINE)
    assert match, (name, out)
    return match.group(1)


def test_the_summary_table_shows_how_the_export_was_chosen():
    from async_rl_ros.local.cli import summary_rows

    summary = {'task': 'push', 'mode': 'async', 'env_steps': 10, 'updates': 5,
               'wall_time_s': 1.0, 'samples_per_s': 10.0, 'updates_per_s': 5.0,
               'final_evaluation': 'skipped: test', 'checkpoint': 'c.pt',
               'policy': '/run/policy.pt', 'learning_curve': '/run/curve.png',
               'export_candidates': [
                   {'version': 7, 'env_steps': 5, 'evaluator_success_rate': 0.5,
                    'selection_success_rate': 0.28},
                   {'version': 9, 'env_steps': 10, 'evaluator_success_rate': 0.4,
                    'selection_success_rate': 0.47},
                   {'version': 9, 'online_actor': True, 'env_steps': 10,
                    'evaluator_success_rate': 0.45, 'selection_success_rate': 0.52}],
               'exported_policy_version': 9, 'exported_policy_success_rate': 0.45,
               'exported_policy_env_steps': 10, 'exported_policy_actor': 'online'}
    rows = dict(summary_rows(summary, None, 'finished'))
    assert rows['export chosen on fresh episodes'] == 'v7 28 %, v9 47 %, v9 online 52 %'
    assert rows['exported policy'] == 'version 9, online actor (evaluated 45 % at 10 env steps)'


def test_resume_continues_from_the_checkpoint(tmp_path):
    evaluated = ('--set', 'learner.eval_every=100', '--set', 'learner.eval_episodes=2')
    first = run_cli(tmp_path, '--steps', '300', '--mode', 'single', *evaluated)
    assert first.wait(timeout=600) == 0
    second = run_cli(tmp_path, '--steps', '500', '--resume', '--mode', 'single',
                     '--episodes', '3', *evaluated)
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, err
    assert re.search(r'^held-out episodes\s+3$', out, re.MULTILINE), out  # --episodes wins
    assert 'resumed from' in err and 'at 300 env steps' in err
    assert 'replay buffer empty: the checkpoint holds none' in err, err  # the default
    # The snapshots scored before the resume stay export candidates (the three best).
    assert re.search(r'^3 snapshots evaluated before the checkpoint stay export candidates '
                     r'\(best: \d+ % at [123]00 env steps\)$', err, re.MULTILINE), err
    assert re.search(r'^env steps, updates\s+500, ', out, re.MULTILINE), out
    # A truncated newest checkpoint: named as skipped, the older one is loaded.
    older, newest = sorted((tmp_path / 'run' / 'ckpt').glob('ckpt_*.pt'))[-2:]
    newest.write_bytes(newest.read_bytes()[:2000])
    third = run_cli(tmp_path, '--steps', '600', '--resume', '--mode', 'single', *evaluated)
    out, err = third.communicate(timeout=600)
    assert third.returncode == 0, err
    assert f'checkpoint {newest} skipped: truncated' in err
    assert f'resumed from {older} at 300 env steps' in err


def test_a_resume_needs_none_of_the_settings_the_run_was_started_with(tmp_path):
    first = run_cli(tmp_path, '--task', 'push', '--mode', 'single', '--steps', '300',
                    '--set', 'env_worker.task.control_hz=10')
    assert first.wait(timeout=600) == 0
    saved = tmp_path / 'run' / 'latest' / 'config.yaml'
    kept = saved.read_bytes()
    # A resume the checkpoint refuses leaves the run's configuration as it was.
    refused = run_cli(tmp_path, '--resume', '--set', 'learner.sac.hidden_sizes=[64, 64]')
    assert refused.wait(timeout=300) == 2 and saved.read_bytes() == kept
    second = run_cli(tmp_path, '--resume', '--steps', '400')
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, err
    assert 'resumed from' in err and 'at 300 env steps' in err
    assert out.lstrip().startswith(f'push, SAC single (config: {saved.resolve()})'), out
    assert re.search(r'^env steps, updates\s+400, ', out, re.MULTILINE), out  # --steps wins
    params = yaml.safe_load(saved.read_text())
    assert params['env_worker']['ros__parameters']['task']['control_hz'] == 10.0
    assert params['learner']['ros__parameters']['total_env_steps'] == 400


@posix
@pytest.mark.parametrize('mode, children', [('single', 0), ('async', 3)])
def test_ctrl_c_writes_a_final_checkpoint_and_exits_130(tmp_path, mode, children):
    """In one process, and with two worker processes (and the resource tracker) to stop."""
    proc = run_cli(tmp_path, '--steps', '1000000', '--mode', mode, '--workers', '2')
    found = wait_for_training(proc, children=children)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert 'Traceback' not in err
    assert re.search(r'^outcome\s+stopped by SIGINT \(Ctrl-C\)$', out, re.MULTILINE), out
    assert_saved(tmp_path)
    assert_gone(found)


def test_ctrl_c_during_the_final_evaluation_cuts_it_short_and_still_exports(tmp_path):
    """The budget is reached; a Ctrl-C while a (long) final evaluation runs waits an episode."""
    proc = run_cli(tmp_path, '--steps', '300', '--mode', 'single',
                   '--set', 'learner.final_eval_episodes=100000')
    deadline = time.monotonic() + 300
    # finish_run writes the final checkpoint first, then evaluates.
    while not list((tmp_path / 'run' / 'ckpt').glob('ckpt_*.pt')):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert 'Traceback' not in err and 'SIGINT (Ctrl-C): stopping' in err, err
    summary = json.loads((tmp_path / 'run' / 'latest' / 'summary.json').read_text())
    assert re.fullmatch(r'cut short: stopped after \d+ of \d+ episodes',
                        summary['final_evaluation']), summary['final_evaluation']
    assert summary['interrupted'] is False and summary['env_steps'] >= 300
    assert 'eval_success_rate' not in summary
    assert_saved(tmp_path)


@posix
def test_sigterm_saves_everything_exits_143_and_stops_the_workers(tmp_path):
    proc = run_cli(tmp_path, '--steps', '1000000', '--workers', '1',
                   '--set', 'local_runner.stats_interval_s=0.2')
    children = wait_for_training(proc, children=2)  # a worker, the resource tracker
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err
    assert 'Traceback' not in err and 'SIGTERM: stopping' in err
    assert re.search(r'^outcome\s+stopped by SIGTERM$', out, re.MULTILINE), out
    assert_saved(tmp_path)
    assert_gone(children)
    # A service manager kills what is still there after 10 s: no held-out judgement then.
    summary = json.loads((tmp_path / 'run' / 'latest' / 'summary.json').read_text())
    assert summary['final_evaluation'] == 'skipped: stopped by SIGTERM'
    assert 'eval_success_rate' not in summary
    assert re.search(r'^held-out evaluation\s+skipped: stopped by SIGTERM$', out, re.MULTILINE)


@posix
def test_sigterm_to_every_process_of_the_run_stops_it_through_the_learner(tmp_path):
    """``timeout``, systemd (``KillMode=control-group``) and batch schedulers signal them all."""
    proc = run_cli(tmp_path, '--steps', '1000000', '--workers', '1',
                   '--set', 'learner.eval_every=100', '--set', 'learner.eval_episodes=1',
                   start_new_session=True)
    children = wait_for_training(proc, children=3)  # a worker, the evaluator, the tracker
    record = tmp_path / 'run' / 'latest' / 'metrics.jsonl'
    deadline = time.monotonic() + 300  # a hang guard: the evaluator scores a snapshot first
    while '"eval/success_rate"' not in (record.read_text() if record.exists() else ''):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err
    # The children were stopped by the learner and ended through their own clean-up code: a
    # child killed by the signal leaves its semaphores to the resource tracker, which says so.
    assert 'Traceback' not in err and 'leaked' not in err, err
    assert re.search(r'^outcome\s+stopped by SIGTERM$', out, re.MULTILINE), out
    assert_saved(tmp_path)
    assert_gone(children)


@posix
def test_ctrl_c_through_a_pipe_whose_reader_is_gone_still_saves(tmp_path):
    """``async-rl-train 2>&1 | tee log``, then Ctrl-C: tee dies first."""
    read_fd, write_fd = os.pipe()
    proc = run_cli(tmp_path, '--steps', '1000000', '--workers', '1',
                   '--set', 'local_runner.stats_interval_s=0.2', stdout=write_fd,
                   stderr=subprocess.STDOUT)
    os.close(write_fd)
    reader = os.fdopen(read_fd, 'r')
    for line in reader:  # read like tee until training is under way
        match = re.match(r'async: (\d+)/', line)
        if match and int(match.group(1)) > 0:
            break
    start = time.time()
    reader.close()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=300) == 130
    assert_saved(tmp_path, start_mtime=start - 1.0)


@posix
def test_sigkill_of_the_trainer_leaves_no_process_behind(tmp_path):
    proc = run_cli(tmp_path, '--steps', '1000000', '--workers', '1',
                   '--set', 'local_runner.stats_interval_s=0.2', stdout=subprocess.DEVNULL)
    children = wait_for_training(proc, children=2)
    proc.kill()
    proc.wait(timeout=60)
    assert_gone(children)


def write_checkpoint(tmp_path, poison=None, task=None):
    """Write a checkpoint of the TINY learner (hidden sizes 32, 32) into the run directory."""
    from async_rl_ros.core.config import LearnerConfig
    from async_rl_ros.core.learning.learner import Learner
    cfg = LearnerConfig().replace(**{'sac.hidden_sizes': [32, 32],
                                     'checkpoint.directory': str(tmp_path / 'run' / 'ckpt')})
    learner = Learner(cfg, 21, 3, task=task)
    if poison is not None:
        poison(learner)
    return pathlib.Path(learner.save_checkpoint())


def diverged_temperature(learner):
    """Set log(alpha) = 100: alpha overflows float32, every loss is non-finite."""
    with torch.no_grad():
        learner.sac.log_alpha.fill_(100.0)


def test_diverged_training_saves_and_reports_in_one_line(tmp_path):
    poisoned = write_checkpoint(tmp_path, diverged_temperature)
    proc = run_cli(tmp_path, '--steps', '2000', '--mode', 'single', '--resume',
                   '--set', 'learner.doctor.max_consecutive_skips=5')
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 3, err
    assert 'Traceback' not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith('async-rl-train: training diverged: ') and 'last good state' in last
    state = assert_saved(tmp_path)
    assert state['checkpoint']['step'] > torch.load(poisoned, weights_only=False)['counters'][
        'updates']


def truncate(path):
    path.write_bytes(path.read_bytes()[:1000])


@pytest.mark.parametrize('case, needle', [
    ('latin-1 config', 'is not UTF-8'),
    ('empty config', 'holds none'),
    ('no checkpoint', "no run 'latest' to resume"),
    ('empty checkpoint', 'empty file (0 bytes)'),
    ('truncated checkpoint', 'truncated'),
    ('other hidden sizes', 'learner.sac.hidden_sizes = [32, 32] in the checkpoint but [64, 64]'),
    ('another task', 'env_worker.task.name = push in the checkpoint but reach in this '
     'configuration; set env_worker.task.name=push (--task push)'),
    ('no policy file', "--policy = 'nothing.pt' is not allowed (one of sac, scripted, random, "
     'or an exported policy file that exists'),
    ('not a policy file', 'params.yaml: is not a TorchScript archive'),
    ('policy of another task', "exported for task 'push', not for the task 'reach'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, needle):
    args = ['--mode', 'single', '--steps', '300']
    config = tmp_path / 'params.yaml'
    if case == 'no policy file':
        args += ['--policy', 'nothing.pt']
    elif case == 'not a policy file':
        config.write_text('learner:\n  ros__parameters:\n    seed: 1\n')
        args += ['--policy', str(config)]
    elif case == 'policy of another task':
        from async_rl_ros.core.config import LearnerConfig
        from async_rl_ros.core.learning.artifacts import export_policy
        from async_rl_ros.core.learning.learner import Learner
        learner = Learner(LearnerConfig().replace(**{'sac.hidden_sizes': [16, 16]}), 25, 4,
                          task='push')
        args += ['--policy', str(export_policy(learner, None, tmp_path / 'push.pt')),
                 '--task', 'reach']
    elif case == 'latin-1 config':
        config.write_bytes('learner:\n  ros__parameters:\n    seed: 1  # d\xe9j\xe0\n'
                           .encode('latin-1'))
        args += ['--config', str(config)]
    elif case == 'empty config':
        config.write_text('')
        args += ['--config', str(config)]
    else:
        args.append('--resume')
        if case != 'no checkpoint':
            path = write_checkpoint(tmp_path, task='push' if case == 'another task' else None)
            if case == 'empty checkpoint':
                path.write_bytes(b'')
            elif case == 'truncated checkpoint':
                truncate(path)
            else:  # the task, when it differs, is named first
                args += ['--set', 'learner.sac.hidden_sizes=[64, 64]']
    proc = run_cli(tmp_path, *args)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err
    lines = [line for line in err.strip().splitlines()
             if not line.startswith('pybullet build time')]  # PyBullet's banner, from C
    assert len(lines) == 1 and lines[0].startswith('async-rl-train: '), err
    assert needle in lines[0]
