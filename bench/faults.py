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
Fault scenarios (issues 12 and 35), run against the real ``async-rl-train`` CLI and its parts.

Each scenario starts the CLI as a subprocess with a tiny network in a fresh directory, does
to it what a user, a service manager or a broken disk does (Ctrl-C through a dead pipe,
SIGTERM, SIGKILL, a corrupt or foreign checkpoint, a bad config, a diverging run ...) and
checks what happened: the exit status, the final checkpoint and ``policy.pt``, one line of
error instead of a traceback, and that no worker process (nor multiprocessing's resource
tracker) outlives the trainer.

Usage: ``python bench/faults.py [--quick] [--only NAME ...] [--list]``. One line per scenario,
then a JSON summary: ``{"scenarios": N, "passed": N, "orphans_left": 0, "runs_lost": 0, ...}``
(``orphans_left``: processes still alive after the trainer ended; ``runs_lost``: runs stopped
by a signal or a failure that did not leave a final checkpoint and policy), plus what the
scenarios measured: ``sigterm_exit_s`` / ``sigint_exit_s`` (signal to exit, goal <= 10 s),
``packets_crafted`` / ``packets_accepted`` / ``packets_uncounted`` / ``max_packet_cpu_s``
(bench/fault_packets.py) and ``ckpt_flips`` / ``ckpt_silent_loads`` / ``tracebacks``
(bench/fault_checkpoints.py).

Adding a scenario is one decorated function::

    @scenario('short-name', 'what is done to the run')
    def _my_case(run: Run) -> Outcome:
        proc = run.cli('--steps', '300')
        rc, out, err = run.finish(proc)
        return Outcome(rc == 0, f'exit {rc}')
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable

import psutil

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / 'async_rl_ros'
TINY = ['--set', 'learner.sac.hidden_sizes=[32, 32]', '--set', 'learner.batch.initial_batch=64',
        '--set', 'learner.batch.min_batch=8', '--set', 'learner.learning_starts=100',
        '--set', 'learner.warmup_steps=100', '--set', 'learner.eval_every=0',
        '--set', 'learner.replay.capacity=20000', '--set', 'local_runner.stats_interval_s=0.2',
        '--episodes', '2']
HUGE_BUDGET = '100000000'
EXIT_GOAL_S = 10.0  # s from a stop signal to exit: what docker stop allows before SIGKILL


@dataclasses.dataclass
class Outcome:
    """What one scenario found."""

    passed: bool
    detail: str
    orphans: int = 0    # processes that outlived the trainer
    lost: bool = False  # a stopped run without final checkpoint and policy
    figures: dict = dataclasses.field(default_factory=dict)  # measured, for the JSON line


class Run:
    """One scenario's directory and helpers around the CLI."""

    def __init__(self, directory: Path, quick: bool):
        self.dir = directory
        self.quick = quick
        self.workers = '1' if quick else '2'
        self.train_s = 0.0 if quick else 10.0  # extra training before a signal
        self.ckpt = directory / 'run' / 'ckpt'

    def cli(self, *args: str, **popen) -> subprocess.Popen:
        """Start ``async-rl-train`` with the tiny settings in this scenario's directory."""
        cmd = [sys.executable, '-m', 'async_rl_ros.local.cli', *TINY,
               '--set', f'learner.log_dir={self.dir}/run',
               '--set', f'learner.checkpoint.directory={self.ckpt}', *args]
        env = dict(os.environ, OMP_NUM_THREADS='1',
                   PYTHONPATH=os.pathsep.join([str(PACKAGE), os.environ.get('PYTHONPATH', '')]))
        popen.setdefault('stdout', subprocess.PIPE)
        popen.setdefault('stderr', subprocess.PIPE)
        return subprocess.Popen(cmd, text=True, env=env, **popen)

    @staticmethod
    def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
        """Wait for the CLI; return ``(exit status, stdout, stderr)``."""
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # a trainer that does not stop is killed
            if proc.poll() is None:
                proc.kill()
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:  # orphaned children hold the pipes open
                out, err = '', ''
            err = (err or '') + f'\n(no end of output after {timeout:.0f} s)'
        return proc.wait(timeout=60), out or '', err or ''

    def wait_training(self, proc: subprocess.Popen, lines, children: int = 0,
                      timeout: float = 90) -> list[psutil.Process]:
        """
        Read progress ``lines`` until env steps were taken; return the child processes.

        A trainer that prints no progress (off a terminal) is given ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([lines], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            line = lines.readline()
            match = re.match(r'\w+: (\d+)/', line)
            if not line or (match and int(match.group(1)) > 0):
                break
        found = psutil.Process(proc.pid).children(recursive=True)
        while len(found) < children and time.monotonic() < deadline:
            time.sleep(0.2)
            found = psutil.Process(proc.pid).children(recursive=True)
        time.sleep(self.train_s)
        return found

    def saved(self, since: float) -> bool:
        """Tell whether a checkpoint and ``policy.pt`` were written after ``since``."""
        checkpoints = sorted(self.ckpt.glob('ckpt_*.pt'))
        policy = self.dir / 'run' / 'latest' / 'policy.pt'  # the newest run's own folder
        return bool(checkpoints) and checkpoints[-1].stat().st_mtime >= since and \
            policy.is_file() and policy.stat().st_mtime >= since

    @staticmethod
    def orphans(processes: list[psutil.Process], timeout: float = 30.0) -> int:
        """Count the processes still alive after ``timeout`` s (and kill them)."""
        _, alive = psutil.wait_procs(processes, timeout=timeout)
        alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
        for p in alive:
            p.kill()
        return len(alive)

    def write_checkpoint(self, hidden=(32, 32), poison: Callable | None = None) -> Path:
        """Write a learner checkpoint as a previous run would have, optionally damaged."""
        from async_rl_ros.core.config import EnvWorkerConfig, LearnerConfig
        from async_rl_ros.core.learning.learner import Learner
        from async_rl_ros.envs.tasks import resolve_task
        cfg = LearnerConfig().replace(**{'sac.hidden_sizes': list(hidden),
                                         'checkpoint.directory': str(self.ckpt)})
        _, spec = resolve_task(EnvWorkerConfig())  # what the resumed run's learner has
        learner = Learner(cfg, spec.obs_dim, spec.act_dim)
        if poison is not None:
            poison(learner)
        return Path(learner.save_checkpoint())


def one_line(err: str) -> bool:
    """Tell whether stderr is one ``async-rl-train:`` line (PyBullet's C banner aside)."""
    lines = [x for x in err.strip().splitlines() if not x.startswith('pybullet build time')]
    return len(lines) == 1 and lines[0].startswith('async-rl-train: ')


SCENARIOS: dict[str, tuple[str, Callable[[Run], Outcome]]] = {}


def scenario(name: str, doc: str):
    """Register a scenario function ``f(run) -> Outcome`` under ``name``."""
    def register(fn: Callable[[Run], Outcome]) -> Callable[[Run], Outcome]:
        SCENARIOS[name] = (doc, fn)
        return fn
    return register


# ====================================================================== scenarios
@scenario('resume-no-replay', 'async: resume a run whose checkpoint has no replay buffer')
def _resume_without_replay(run: Run) -> Outcome:
    """Resume in the default mode: the workers must refill the replay, not wait forever."""
    summary = run.dir / 'run' / 'latest' / 'summary.json'
    rc1, _, _ = run.finish(run.cli('--steps', '1500', '--workers', run.workers))
    first = json.loads(summary.read_text()) if rc1 == 0 else {}
    rc2, _, err2 = run.finish(run.cli('--steps', '3000', '--workers', run.workers, '--resume'),
                              timeout=300)
    second = json.loads(summary.read_text()) if rc2 == 0 else {}
    steps = (first.get('env_steps'), second.get('env_steps'))
    updates = (first.get('updates'), second.get('updates'))
    ok = (rc1 == rc2 == 0 and 'resumed from' in err2 and (steps[1] or 0) >= 3000
          and (updates[1] or 0) > (updates[0] or 0))
    return Outcome(ok, f'exit {rc1}, {rc2}; env steps {steps}; updates {updates}')


def _signal_run(run: Run, signum: int, expect: int, pipe: bool) -> Outcome:
    # The shipped number of held-out episodes: what a stop signal must not wait for.
    from async_rl_ros.core.config import LearnerConfig
    args = ['--steps', HUGE_BUDGET, '--workers', run.workers,
            '--episodes', str(LearnerConfig().final_eval_episodes)]
    if pipe:  # async-rl-train 2>&1 | tee log; Ctrl-C ends tee before the trainer
        read_fd, write_fd = os.pipe()
        proc = run.cli(*args, stdout=write_fd, stderr=subprocess.STDOUT)
        os.close(write_fd)
        lines = os.fdopen(read_fd, 'r')
    else:
        proc = run.cli(*args)
        lines = proc.stderr
    children = run.wait_training(proc, lines, children=2)
    since = time.time() - 1.0
    if pipe:
        lines.close()
    signalled = time.monotonic()
    proc.send_signal(signum)
    rc, _, err = run.finish(proc, timeout=120)
    exit_s = time.monotonic() - signalled
    saved = run.saved(since)
    orphans = run.orphans(children)
    ok = (rc == expect and saved and not orphans and 'Traceback' not in err
          and exit_s <= EXIT_GOAL_S)
    name = signal.Signals(signum).name.lower()
    return Outcome(ok, f'exit {rc} (want {expect}) {exit_s:.1f} s after the signal (goal '
                   f'<= {EXIT_GOAL_S:.0f}), final checkpoint and policy '
                   f'{"written" if saved else "MISSING"}, {orphans} orphans',
                   orphans=orphans, lost=not saved, figures={f'{name}_exit_s': round(exit_s, 2)})


@scenario('sigint-dead-pipe', 'Ctrl-C after the reader of stdout/stderr (tee) is gone')
def _sigint_through_dead_pipe(run: Run) -> Outcome:
    return _signal_run(run, signal.SIGINT, 130, pipe=True)


@scenario('sigterm', 'SIGTERM (timeout, docker stop, systemd) during async training')
def _sigterm(run: Run) -> Outcome:
    return _signal_run(run, signal.SIGTERM, 143, pipe=False)


@scenario('sigkill-orphans', 'SIGKILL of the trainer: its workers and tracker must follow')
def _sigkill(run: Run) -> Outcome:
    proc = run.cli('--steps', HUGE_BUDGET, '--workers', run.workers, stdout=subprocess.DEVNULL)
    children = run.wait_training(proc, proc.stderr, children=2)
    proc.kill()
    proc.wait(timeout=60)
    orphans = run.orphans(children)
    return Outcome(orphans == 0, f'{len(children)} child processes, {orphans} left',
                   orphans=orphans)


@scenario('diverged', 'training diverges (log alpha = 100: every loss is non-finite)')
def _diverged(run: Run) -> Outcome:
    def poison(learner):
        with __import__('torch').no_grad():
            learner.sac.log_alpha.fill_(100.0)
    run.write_checkpoint(poison=poison)
    since = time.time() - 1.0
    rc, _, err = run.finish(run.cli('--resume', '--steps', '3000', '--workers', run.workers,
                                    '--set', 'learner.doctor.max_consecutive_skips=5'))
    saved = run.saved(since)
    last = err.strip().splitlines()[-1] if err.strip() else ''
    ok = rc == 3 and saved and 'Traceback' not in err and 'training diverged' in last
    return Outcome(ok, f'exit {rc} (want 3), final checkpoint '
                   f'{"written" if saved else "MISSING"}: {last[:90]}', lost=not saved)


@scenario('corrupt-newest', 'the newest checkpoint is truncated, an older one is intact')
def _corrupt_newest(run: Run) -> Outcome:
    older = run.write_checkpoint()
    newest = run.ckpt / 'ckpt_000000099.pt'
    newest.write_bytes(older.read_bytes()[:1500])
    rc, _, err = run.finish(run.cli('--mode', 'single', '--steps', '200', '--resume'))
    ok = rc == 0 and f'{newest} skipped: truncated' in err and f'resumed from {older}' in err
    return Outcome(ok, f'exit {rc}; names the corrupt and the loaded file: {ok}')


def _bad_input(run: Run, args: list[str], needle: str) -> Outcome:
    rc, _, err = run.finish(run.cli('--mode', 'single', '--steps', '200', *args))
    ok = rc == 2 and one_line(err) and needle in err
    line = err.strip().splitlines()[-1] if err.strip() else ''
    return Outcome(ok, f'exit {rc} (want 2), {"one line" if one_line(err) else "NOT one line"}'
                   f': {line[16:100]}')


@scenario('all-corrupt', 'every checkpoint is empty or truncated')
def _all_corrupt(run: Run) -> Outcome:
    first = run.write_checkpoint()
    (run.ckpt / 'ckpt_000000007.pt').write_bytes(first.read_bytes()[:1500])
    first.write_bytes(b'')
    return _bad_input(run, ['--resume'], 'no usable checkpoint')


@scenario('other-architecture', '--resume with other sac.hidden_sizes than the checkpoint')
def _other_architecture(run: Run) -> Outcome:
    run.write_checkpoint(hidden=(64, 64))
    return _bad_input(run, ['--resume'], 'hidden_sizes = [64, 64] in the checkpoint')


@scenario('resume-nothing', '--resume with no checkpoint at all')
def _resume_nothing(run: Run) -> Outcome:
    return _bad_input(run, ['--resume'], "no run 'latest' to resume")


@scenario('config-not-utf8', 'a Latin-1 config file')
def _latin1_config(run: Run) -> Outcome:
    path = run.dir / 'latin1.yaml'
    path.write_bytes('learner:\n  ros__parameters:\n    seed: 1  # d\xe9j\xe0\n'.encode('latin-1'))
    return _bad_input(run, ['--config', str(path)], 'UTF-8')


@scenario('config-empty', 'an empty config file')
def _empty_config(run: Run) -> Outcome:
    path = run.dir / 'empty.yaml'
    path.write_text('')
    return _bad_input(run, ['--config', str(path)], 'holds none')


def _run_folders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob('*'))
            if p.is_file() and p.name != '.lock'}


@scenario('two-runs-one-root', 'two trainers started at once with the same learner.log_dir')
def _two_runs_one_root(run: Run) -> Outcome:
    root = run.dir / 'runs'
    args = ['--mode', 'single', '--steps', '300', '--set', f'learner.log_dir={root}',
            '--set', "learner.checkpoint.directory=''"]
    procs = [run.cli(*args), run.cli(*args)]
    codes = [run.finish(p)[0] for p in procs]
    folders = _run_folders(root) if root.is_dir() else []
    complete = [f for f in folders if (f / 'policy.pt').is_file()
                and (f / 'summary.json').is_file() and list((f / 'checkpoints').glob('*.pt'))]
    ok = codes == [0, 0] and len(folders) == 2 and len(complete) == 2
    return Outcome(ok, f'exit {codes}; {len(folders)} run folders, {len(complete)} complete')


@scenario('resume-right-run', '--resume NAME continues that run; the newer run is untouched')
def _resume_right_run(run: Run) -> Outcome:
    root = run.dir / 'runs'
    args = ['--mode', 'single', '--set', f'learner.log_dir={root}',
            '--set', "learner.checkpoint.directory=''"]
    codes = [run.finish(run.cli(*args, '--steps', '300'))[0] for _ in range(2)]
    older, newer = (_run_folders(root) + [root, root])[:2]
    before = _files(newer)
    rc, _, err = run.finish(run.cli(*args, '--steps', '500', '--resume', older.name))
    summary = json.loads((older / 'summary.json').read_text()) if rc == 0 else {}
    steps = [json.loads(x)[0] for x in (older / 'metrics.jsonl').read_text().splitlines()
             ] if rc == 0 else [0]
    untouched = _files(newer) == before
    ok = (codes == [0, 0] and rc == 0 and summary.get('env_steps') == 500 and untouched
          and min(steps) <= 300 < max(steps) and (root / 'latest').resolve() == newer)
    return Outcome(ok, f'exit {codes + [rc]}; resumed run at {summary.get("env_steps")} '
                   f'env steps, its record from step {min(steps)}; newer run untouched: '
                   f'{untouched}')


@scenario('crafted-packets', 'weight packets with a valid CRC and wrong content, fed to a '
          "worker's receiver (bench/fault_packets.py)")
def _crafted_packets(run: Run) -> Outcome:
    import fault_packets
    got = fault_packets.measure(run.quick)
    got.pop('cases', None)
    ok = (got['packets_accepted'] == 0 and got['packets_uncounted'] == 0
          and got['max_packet_cpu_s'] <= 0.05)
    return Outcome(ok, ', '.join(f'{k} {v}' for k, v in got.items()), figures=got)


@scenario('checkpoint-flips', "single-bit flips in the newest checkpoint, then --resume's "
          'loader (bench/fault_checkpoints.py)')
def _checkpoint_flips(run: Run) -> Outcome:
    import fault_checkpoints
    got = fault_checkpoints.measure(run.quick)
    got.pop('seconds', None)
    ok = got['ckpt_silent_loads'] == 0 and got['tracebacks'] == 0
    return Outcome(ok, ', '.join(f'{k} {v}' for k, v in got.items()), figures=got)


# ====================================================================== main
def main() -> None:
    """Run the scenarios and print one line each, then the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help='one worker, signals as soon as training runs')
    parser.add_argument('--only', nargs='+', choices=sorted(SCENARIOS), default=None)
    parser.add_argument('--list', action='store_true', help='list the scenarios and exit')
    args = parser.parse_args()
    if args.list:
        for name, (doc, _) in SCENARIOS.items():
            print(f'{name:20s} {doc}')
        return
    sys.path.insert(0, str(PACKAGE))
    names = args.only or list(SCENARIOS)
    passed = orphans = lost = 0
    figures: dict = {}
    for name in names:
        doc, fn = SCENARIOS[name]
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f'faults_{name}_') as tmp:
            try:
                outcome = fn(Run(Path(tmp), args.quick))
            except Exception as exc:  # noqa: B902 -- a scenario that breaks is a failed one
                outcome = Outcome(False, f'scenario error: {type(exc).__name__}: {exc}')
        passed += outcome.passed
        orphans += outcome.orphans
        lost += outcome.lost
        figures.update(outcome.figures)
        print(f'[{"PASS" if outcome.passed else "FAIL"}] {name} ({doc}; '
              f'{time.monotonic() - start:.0f} s): {outcome.detail}', flush=True)
    print(json.dumps({'scenarios': len(names), 'passed': passed, 'orphans_left': orphans,
                      'runs_lost': lost, **figures}))


if __name__ == '__main__':
    main()
