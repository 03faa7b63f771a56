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

"""Every run has its own locked folder; resuming continues the right one; nothing is lost."""

import array
import hashlib
import json
import os
import pathlib
import subprocess
import sys

from async_rl_ros.core.config import EnvWorkerConfig, LearnerConfig, LocalRunnerConfig
from async_rl_ros.core.learning.metrics import MetricsLogger, RECORD
from async_rl_ros.core.learning.run_folder import (CONFIG, find_run, LATEST, open_run,
                                                   PARAMETERS, RunFolder, RunFolderError)
from async_rl_ros.core.param_file import load_node_config
import pytest
import yaml

TINY = ['--mode', 'single', '--episodes', '2', '--set', 'learner.sac.hidden_sizes=[32, 32]',
        '--set', 'learner.batch.initial_batch=64', '--set', 'learner.batch.min_batch=8',
        '--set', 'learner.learning_starts=100', '--set', 'learner.warmup_steps=100',
        '--set', 'learner.eval_every=100', '--set', 'learner.eval_episodes=2']


def cli(root, *args):
    cmd = [sys.executable, '-m', 'async_rl_ros.local.cli', *TINY,
           '--set', f'learner.log_dir={root}', *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS='1'))


def digest(folder):
    """Hash every file of a run folder (the lock file aside)."""
    files = sorted(p for p in folder.rglob('*') if p.is_file() and p.name != '.lock')
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files}


def record_steps(folder):
    return [json.loads(line)[0] for line in (folder / RECORD).read_text().splitlines()]


def test_two_runs_get_two_folders_and_resume_continues_the_one_named(tmp_path):
    root = tmp_path / 'runs'
    first = cli(root, '--steps', '300')
    assert first.returncode == 0, first.stderr
    second = cli(root, '--steps', '300')
    assert second.returncode == 0, second.stderr
    runs = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    assert len(runs) == 2
    older, newer = runs
    assert (root / LATEST).resolve() == newer.resolve()
    for run in runs:  # each run keeps its own artifacts and checkpoints
        assert {'policy.pt', 'summary.json', 'learning_curve.png', RECORD} <= {
            p.name for p in run.iterdir()}
        assert list((run / 'checkpoints').glob('ckpt_*.pt'))
    newer_files = digest(newer)
    # Continue the older run by name: it grows in its own folder; the newer one is untouched.
    resumed = cli(root, '--steps', '500', '--resume', older.name)
    assert resumed.returncode == 0, resumed.stderr
    assert f'(run folder {older.resolve()})' in resumed.stderr
    assert digest(newer) == newer_files
    summary = json.loads((older / 'summary.json').read_text())
    assert summary['env_steps'] == 500
    steps = record_steps(older)  # the curve covers the whole run, not only the resumed part
    assert min(steps) <= 300 < max(steps)
    assert (root / LATEST).resolve() == newer.resolve()  # resuming does not move latest


def test_a_run_keeps_its_configuration_whole_for_a_resume(tmp_path):
    """The file gives back every section exactly, whatever the defaults say."""
    sections = {
        'env_worker': EnvWorkerConfig().replace(**{'task.name': 'push', 'task.control_hz': 10.0,
                                                   'safety.workspace_low': [-0.7, -0.5, 0.05]}),
        'learner': LearnerConfig().replace(**{'sac.hidden_sizes': [64, 48], 'sac.gamma': 0.95,
                                              'log_dir': str(tmp_path)}),
        'local_runner': LocalRunnerConfig().replace(mode='sync', num_workers=3)}
    with RunFolder.start(tmp_path) as run:
        path = run.save_config(sections)
        assert path == run.path / CONFIG and find_run(tmp_path) == run.path
        assert [p.name for p in run.path.iterdir() if p.name != '.lock'] == [CONFIG]
    for node, section in sections.items():
        assert load_node_config(path, node, type(section)) == section, node


def test_a_ros_node_s_parameters_are_kept_as_a_parameter_file(tmp_path):
    """Dotted names nest; rclpy's arrays and tuples become lists (what the learner node gives)."""
    params = {'sac.gamma': 0.95, 'sac.hidden_sizes': array.array('q', [64, 48]),
              'safety.workspace_low': (-0.7, -0.5, 0.05), 'task.name': 'push', 'sim.gui': False}
    with RunFolder.start(tmp_path) as run:
        path = run.save_parameters('learner', params)
        assert path == run.path / PARAMETERS.format(node='learner')
    assert yaml.safe_load(path.read_text(encoding='utf-8')) == {'learner': {'ros__parameters': {
        'sac': {'gamma': 0.95, 'hidden_sizes': [64, 48]},
        'safety': {'workspace_low': [-0.7, -0.5, 0.05]}, 'task': {'name': 'push'},
        'sim': {'gui': False}}}}


def test_resume_without_a_run_is_one_line_and_exit_2(tmp_path):
    result = cli(tmp_path / 'runs', '--steps', '300', '--resume')
    assert result.returncode == 2
    lines = [x for x in result.stderr.strip().splitlines() if not x.startswith('pybullet')]
    assert len(lines) == 1 and "no run 'latest' to resume" in lines[0], result.stderr


def test_a_folder_that_cannot_be_made_is_named_by_its_option(tmp_path):
    """A file where a folder must go, or a path under one: one line naming the option."""
    blocker = tmp_path / 'a_file'
    blocker.write_text('')
    for key, overrides in [
            ('learner.log_dir', {'log_dir': str(blocker)}),
            ('learner.log_dir', {'log_dir': str(blocker / 'runs')}),
            ('learner.checkpoint.directory', {'log_dir': str(tmp_path / 'runs'),
                                              'checkpoint.directory': str(blocker)})]:
        with pytest.raises(RunFolderError, match=rf'^{key} = .* is not a folder this user can '
                           r'create and write \((a file is there|Not a directory)\)$'):
            open_run(LearnerConfig().replace(**overrides))


def test_a_refused_start_leaves_no_folder_and_latest_names_the_run_before(
        tmp_path, monkeypatch):
    """``--resume`` after a refused start must still find the run before it."""
    from async_rl_ros.core.config import ConfigError
    from async_rl_ros.local.train import train

    root = tmp_path / 'runs'
    earlier = RunFolder.start(root)
    earlier.save_config({'learner': LearnerConfig()})
    earlier.close()
    blocker = tmp_path / 'a_file'
    blocker.write_text('')
    with pytest.raises(RunFolderError):  # refused by the run folder itself
        open_run(LearnerConfig().replace(log_dir=str(root), **{
            'checkpoint.directory': str(blocker)}))
    assert find_run(root) == earlier.path
    monkeypatch.delenv('DISPLAY', raising=False)  # refused by the task, inside the run
    with pytest.raises(ConfigError, match='sim.gui'):
        train(EnvWorkerConfig().replace(**{'sim.gui': True}),
              LearnerConfig().replace(log_dir=str(root), total_env_steps=100), progress=False)
    assert sorted(p.name for p in root.iterdir()) == sorted([earlier.path.name, LATEST])
    assert find_run(root) == earlier.path
    with pytest.raises(RunFolderError, match=rf'\(runs there: {earlier.path.name}\)$'):
        find_run(root, 'nope')  # the runs, not the link to one
    # The first run of a root: no link stays behind, and a run that wrote a file is kept.
    first = RunFolder.start(tmp_path / 'other')
    assert first.abandon() and not (tmp_path / 'other' / LATEST).exists()
    wrote = RunFolder.start(tmp_path / 'other')
    (wrote.path / 'stderr.log').write_text('why it stopped')
    assert not wrote.abandon() and find_run(tmp_path / 'other') == wrote.path


def test_a_run_folder_in_use_is_refused_with_the_holder(tmp_path):
    run = RunFolder.start(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, '-c', 'import sys, time\n'
         'from async_rl_ros.core.learning.run_folder import RunFolder\n'
         f'RunFolder.resume({str(tmp_path)!r})\nprint("held", flush=True)\n'
         'sys.stdin.read()'], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        err = holder.stderr.read() if holder.stdout.readline() != 'held\n' else ''
        assert 'in use by another training process' in err  # this process holds it
        run.close()
    finally:
        holder.kill()
        holder.wait()
    # Released: now another process takes it, and this one is refused, naming that process.
    holder = subprocess.Popen(
        [sys.executable, '-c', 'import sys\n'
         'from async_rl_ros.core.learning.run_folder import RunFolder\n'
         f'RunFolder.resume({str(tmp_path)!r})\nprint("held", flush=True)\n'
         'sys.stdin.read()'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == 'held\n'
        with pytest.raises(RunFolderError, match=f'pid {holder.pid}'):
            RunFolder.resume(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    RunFolder.resume(tmp_path).close()  # the kernel dropped the killed holder's lock


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path):
    runs = [RunFolder.start(tmp_path) for _ in range(3)]
    try:
        assert len({r.path for r in runs}) == 3
        assert (tmp_path / LATEST).resolve() == runs[-1].path.resolve()
    finally:
        for run in runs:
            run.close()


def test_a_configured_checkpoint_folder_of_another_run_is_never_pruned(tmp_path):
    shared = tmp_path / 'ckpt'
    cfg = LearnerConfig().replace(**{'log_dir': str(tmp_path / 'runs'),
                                     'checkpoint.directory': str(shared)})
    run, used = open_run(cfg)
    run.close()
    assert used.checkpoint.directory == str(shared)
    shared.mkdir(exist_ok=True)
    (shared / 'ckpt_000000010.pt').write_bytes(b'an earlier run')
    with pytest.raises(RunFolderError, match='holds the checkpoints of an earlier run'):
        open_run(cfg)
    run, used = open_run(cfg, 'latest')  # resuming it is what is allowed
    try:
        assert pathlib.Path(used.log_dir) == run.path
    finally:
        run.close()


def test_the_record_reloads_up_to_the_checkpoint_and_skips_a_torn_line(tmp_path):
    path = tmp_path / RECORD
    logger = MetricsLogger()
    logger.record_to(path)
    for step in (100, 200, 300, 400):
        logger.log({'charts/episodic_return': step / 100}, step)
    logger.close()
    with open(path, 'a') as f:
        f.write('[500, "charts/episodic_ret')  # killed while writing
    resumed = MetricsLogger()
    assert resumed.record_to(path, until_step=300) == 3  # 400 came after the checkpoint
    resumed.log({'charts/episodic_return': 9.0}, 350)
    resumed.close()
    assert resumed.history['charts/episodic_return'] == [(100, 1.0), (200, 2.0), (300, 3.0),
                                                         (350, 9.0)]
    assert [json.loads(x)[0] for x in path.read_text().splitlines()] == [100, 200, 300, 350]
