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
The arm's control loop against the controller double, idle and beside a training learner.

For each rate -- 25 Hz ``speedj`` and 125 Hz ``servoj`` (e-Series, 500 Hz RTDE,
``rtde.speed_scaling`` 1, the shipped 10 Hz watchdog) -- and each load -- the machine idle,
then a learner training (SAC updates on the reach task's shapes, in its own process) plus a
CPU hog on every core -- two loops drive the double: the env worker as the runtime runs it
(``build_worker``, ``WorkerRuntime``, the policy fit for control, new weights every 2 s) and
the policy runner's loop (an exported TorchScript policy, :class:`FittedPolicy`). The double
stands in for the controller, a machine of its own: it gets real-time priority when the OS
allows it. The hogs and the learner end by themselves (bounded in time, and when this
process is gone).

Keys per run and, at the top, the worst loaded run: ``step_p50_ms``, ``step_p99_ms``
(observation in to command out), ``deadline_misses_per_10k`` (steps later than one control
period, and stale-state holds), ``watchdog_cuts`` (programs the controller's watchdog
ended), ``first_action_ms`` (inference of the first action), ``false_person_stops`` (a
person asked for although nothing was wrong).

Usage: ``python bench/arm_loop.py [--quick] [--seconds S]``; the last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / 'async_rl_ros' / 'test'), str(ROOT / 'bench')]

_HOG = ('import os, sys, time\n'
        'end, parent = time.monotonic() + float(sys.argv[1]), os.getppid()\n'
        'n = 0\n'
        'while time.monotonic() < end:\n'
        '    n += 1\n'
        '    if n % 100000 == 0 and os.getppid() != parent:\n'
        '        break\n')
RATES = {25: 'speedj', 125: 'servoj'}
KEYS = ('step_p50_ms', 'step_p99_ms', 'deadline_misses_per_10k', 'watchdog_cuts',
        'first_action_ms', 'false_person_stops')


def learner_main(seconds: float) -> None:
    """Train SAC on random reach-task transitions for ``seconds`` (the load; own process)."""
    import torch
    from async_rl_ros.core.workers.realtime import cpu_plan, pin
    from learner_throughput import make_learner, shipped

    plan = cpu_plan()
    pin(plan.learner)
    torch.set_num_threads(plan.learner_threads)
    learner = make_learner(shipped(torch.device('cpu'), 'off', False, 256), 2_000)
    parent, end = os.getppid(), time.monotonic() + seconds
    while time.monotonic() < end and os.getppid() == parent:
        learner.train_step()


def _still_loaded(procs: list[subprocess.Popen]) -> None:
    """End the bench if a process of the load is gone: the run it loaded would be idle."""
    for proc in procs:
        if proc.poll() is not None:
            raise SystemExit(f'arm_loop: a load process ({" ".join(map(str, proc.args[1:]))}) '
                             f'ended with exit status {proc.returncode} during a loaded run')


def _realtime_double(pid: int) -> bool:
    """Give every thread of the double SCHED_FIFO 50 (it stands in for a controller)."""
    try:
        for tid in os.listdir(f'/proc/{pid}/task'):
            os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(50))
        return True
    except (OSError, AttributeError):
        return False


def _load(seconds: float) -> list[subprocess.Popen]:
    """Start the learner and one hog per CPU; all end by themselves after ``seconds``."""
    procs = [subprocess.Popen([sys.executable, __file__, '--learner', str(seconds)])]
    for _ in range(len(os.sched_getaffinity(0))):
        procs.append(subprocess.Popen([sys.executable, '-c', _HOG, str(seconds)]))
    return procs


def _policy_state(obs_dim: int, act_dim: int, hidden, version: int):
    import numpy as np
    from async_rl_ros.core.learning.networks import Actor
    from async_rl_ros.core.records import PolicyState

    actor = Actor(obs_dim, act_dim, hidden)
    return PolicyState({k: v.detach().clone() for k, v in actor.state_dict().items()},
                       np.zeros(obs_dim, np.float32), np.ones(obs_dim, np.float32), 5.0,
                       version)


def run_worker(cfg, seconds: float, hidden=(256, 256)) -> dict:
    """Step the env worker as the runtime does for ``seconds``; return its figures."""
    from async_rl_ros.core.workers.runtime import WorkerRuntime
    from async_rl_ros.envs.factory import build_worker

    from async_rl_ros.core.config import LocalRunnerConfig
    runner = LocalRunnerConfig()  # the shipped batching
    built = build_worker(cfg, 0, hidden, runner.transition_batch,
                         max_batch_lag=runner.max_batch_lag)
    built.worker.policy.fit_for_control()
    backend = built.env.unwrapped.backend
    obs_dim = built.env.observation_space.shape[0]
    act_dim = built.env.action_space.shape[0]
    pending = {'next': 0.0, 'version': 0}

    def poll():
        if time.monotonic() < pending['next']:
            return None
        pending['next'] = time.monotonic() + 2.0
        pending['version'] += 1
        if built.gate is not None:
            built.gate.heartbeat(pending['version'])
        return _policy_state(obs_dim, act_dim, hidden, pending['version'])

    runtime = WorkerRuntime(built, lambda batch, episodes: True, poll)
    thread = threading.Thread(target=runtime.run, name='worker')
    thread.start()
    try:
        runtime.stop_event.wait(seconds)
    finally:
        runtime.stop()
        thread.join(timeout=30.0)
        summary = backend.summary()
        built.env.close()
    return {'summary': summary, 'first_action_ms': built.worker.policy.first_action_ms,
            'person': runtime.state.startswith('halted')}


def run_policy_runner(cfg, seconds: float, tmp: pathlib.Path) -> dict:
    """Run the policy runner's loop with an exported policy for ``seconds``."""
    import torch
    from async_rl_ros.core.errors import NeedsPerson
    from async_rl_ros.core.learning.networks import PolicyForExport
    from async_rl_ros.core.policy_file import PolicyManifest, save_policy_file
    from async_rl_ros.core.workers.inference import FittedPolicy
    from async_rl_ros.envs.factory import build_env

    env, spec = build_env(cfg)
    path = tmp / 'policy.pt'
    save_policy_file(torch.jit.script(PolicyForExport(spec.obs_dim, spec.act_dim)), path,
                     PolicyManifest(task=spec.name, obs_dim=spec.obs_dim, act_dim=spec.act_dim,
                                    policy_version=0, env_steps=0))
    policy = FittedPolicy.load(str(path), spec.name, spec.obs_dim, spec.act_dim)
    person = False
    try:
        obs, _ = env.reset(seed=cfg.seed)
        end = time.monotonic() + seconds
        while time.monotonic() < end:   # the policy runner's episode loop
            obs, _, terminated, truncated, _ = env.step(policy(obs))
            if terminated or truncated:
                obs, _ = env.reset()
    except NeedsPerson as exc:
        print(f'  person asked for: {exc}', flush=True)
        person = True
    finally:
        summary = env.unwrapped.backend.summary()
        env.close()
    return {'summary': summary, 'first_action_ms': policy.first_action_ms, 'person': person}


def _row(out: dict, cuts: int) -> dict:
    s = out['summary']
    steps = max(1, s['step_ms'].get('n', 0))
    misses = sum(s['deadline_misses'].values())
    return {'step_p50_ms': s['step_ms'].get('p50'), 'step_p99_ms': s['step_ms'].get('p99'),
            'deadline_misses_per_10k': round(1e4 * misses / steps, 1), 'watchdog_cuts': cuts,
            'first_action_ms': out['first_action_ms'], 'false_person_stops': int(out['person']),
            'steps': s['step_ms'].get('n', 0), 'misses': s['deadline_misses'],
            'interruptions': s['interruptions'], 'realtime': s['realtime'],
            'phase_p50_p99_ms': {k: [v.get('p50'), v.get('p99')]
                                 for k, v in s['phase_ms'].items()}}


def main() -> None:
    """Run every rate, load and loop; print a table, then the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='10 s per run: a smoke run')
    parser.add_argument('--seconds', type=float, default=None, help='per run (default 60)')
    parser.add_argument('--learner', type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument('--rates', type=int, nargs='+', default=list(RATES), choices=list(RATES))
    args = parser.parse_args()
    if args.learner is not None:
        return learner_main(args.learner)
    seconds = args.seconds or (10.0 if args.quick else 60.0)

    import tempfile

    from async_rl_ros.core.config import EnvWorkerConfig
    from ur_double.harness import DoubleProcess

    rows = []
    print(f'{"rate":>6} {"load":>6} {"loop":>8} | {"p50 ms":>7} {"p99 ms":>7} '
          f'{"miss/10k":>8} {"cuts":>4} {"first ms":>8} {"person":>6} {"steps":>6}', flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for hz, mode in ((hz, RATES[hz]) for hz in args.rates):
            for loaded in (False, True):
                double = DoubleProcess(series='e')
                procs = []
                try:
                    rt = _realtime_double(double.proc.pid)
                    cfg = EnvWorkerConfig().replace(**{
                        'backend': 'ur5', 'rtde.robot_ip': double.ip, 'rtde.frequency': 500.0,
                        'rtde.control_mode': mode, 'task.control_hz': float(hz),
                        'rtde.speed_scaling': 1.0, 'rtde.heartbeat_timeout_s': 3600.0})
                    if loaded:
                        procs = _load(2 * seconds + 60.0)
                        time.sleep(3.0)   # the learner is training before the loop starts
                    for loop in ('worker', 'runner'):
                        before = double.state()['watchdog_trips']
                        out = (run_worker(cfg, seconds) if loop == 'worker' else
                               run_policy_runner(cfg, seconds, pathlib.Path(tmp)))
                        row = _row(out, double.state()['watchdog_trips'] - before)
                        row.update(rate_hz=hz, mode=mode, load='loaded' if loaded else 'idle',
                                   loop=loop, double_realtime=rt)
                        _still_loaded(procs)
                        rows.append(row)
                        print(f'{hz:>4}Hz {row["load"]:>6} {loop:>8} | '
                              f'{row["step_p50_ms"]:>7} {row["step_p99_ms"]:>7} '
                              f'{row["deadline_misses_per_10k"]:>8} {row["watchdog_cuts"]:>4} '
                              f'{row["first_action_ms"]:>8} {row["false_person_stops"]:>6} '
                              f'{row["steps"]:>6}', flush=True)
                finally:
                    for proc in procs:
                        proc.terminate()
                    for proc in procs:
                        proc.wait(timeout=30.0)
                    double.close()
    loaded_rows = [r for r in rows if r['load'] == 'loaded'] or rows
    worst = {k: max((r[k] for r in loaded_rows if r[k] is not None), default=None)
             for k in KEYS}
    worst['step_p99_ms_by_rate'] = {hz: max(r['step_p99_ms'] for r in loaded_rows
                                            if r['rate_hz'] == hz) for hz in args.rates}
    print(json.dumps({**worst, 'seconds_per_run': seconds, 'runs': rows}))


if __name__ == '__main__':
    main()
