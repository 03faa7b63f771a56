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
Env throughput: RL steps/s of the UR5 reach env vs a plain PyBullet loop, 1 and 2 processes.

The plain loop is the least a PyBullet UR5 at 25 Hz control must do per RL step: set the
joint velocity motors, run the physics sub-steps, read joint states and the flange pose. It
uses the same URDF, physics rate, random actions and episode resets as the env, so the ratio
is the cost of everything the env adds (safety filter, observation, reward, bookkeeping).
Rounds of both loops alternate and the median round counts, so machine noise hits both alike.

Usage: ``python bench/env_throughput.py [--quick]``; the last line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time

import numpy as np

EPISODE_STEPS = 100  # 4 s at 25 Hz


def _actions(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n, 6)).astype(np.float32)


def run_env(steps: int, physics_hz: float, seed: int) -> float:
    """Return RL steps/s of the reach env with random actions."""
    from async_rl_ros.envs.reach_env import make_reach_env

    env = make_reach_env(**{'sim.physics_hz': physics_hz})
    actions = _actions(steps, seed)[:, :env.action_space.shape[0]]  # the shipped action
    env.reset(seed=seed)
    start = time.perf_counter()
    for k in range(steps):
        if k % EPISODE_STEPS == 0:
            env.reset()
        env.step(actions[k])
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def run_plain(steps: int, physics_hz: float, seed: int) -> float:
    """Return RL steps/s of the bare PyBullet loop doing the same physics."""
    import pybullet

    from async_rl_ros.core.config import EnvWorkerConfig
    from async_rl_ros.envs.ur5_kinematics import EFFORT_LIMIT
    from async_rl_ros.envs.ur5_urdf import TOOL_LINK_INDEX, ur5_urdf_path

    cfg = EnvWorkerConfig()
    substeps = int(round(physics_hz / cfg.task.control_hz))
    cid = pybullet.connect(pybullet.DIRECT)
    pybullet.setGravity(0, 0, -9.81, physicsClientId=cid)
    pybullet.setTimeStep(1.0 / physics_hz, physicsClientId=cid)
    robot = pybullet.loadURDF(ur5_urdf_path(), useFixedBase=True, physicsClientId=cid)
    joints, forces = list(range(6)), list(EFFORT_LIMIT)
    speed = cfg.task.action_scale * np.asarray(cfg.safety.max_joint_speed)
    home = cfg.task.home_q
    actions = _actions(steps, seed)
    start = time.perf_counter()
    for k in range(steps):
        if k % EPISODE_STEPS == 0:
            for j in joints:
                pybullet.resetJointState(robot, j, home[j], 0.0, physicsClientId=cid)
        pybullet.setJointMotorControlArray(robot, joints, pybullet.VELOCITY_CONTROL,
                                           targetVelocities=list(actions[k] * speed),
                                           forces=forces, physicsClientId=cid)
        for _ in range(substeps):
            pybullet.stepSimulation(physicsClientId=cid)
        pybullet.getJointStates(robot, joints, physicsClientId=cid)
        pybullet.getLinkState(robot, TOOL_LINK_INDEX, computeForwardKinematics=True,
                              physicsClientId=cid)
    rate = steps / (time.perf_counter() - start)
    pybullet.disconnect(physicsClientId=cid)
    return rate


def _job(args: tuple[str, int, float, int]) -> float:
    kind, steps, hz, seed = args
    return (run_env if kind == 'env' else run_plain)(steps, hz, seed)


def measure(pool, kind: str, steps: int, hz: float, procs: int, seed: int) -> float:
    """Return total steps/s of ``procs`` processes running the same loop at once."""
    return sum(pool.map(_job, [(kind, steps, hz, seed + i) for i in range(procs)]))


def main() -> None:
    """Run the benchmark and print the table and the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='short run (< 1 min)')
    parser.add_argument('--rounds', type=int, default=None, help='alternating rounds')
    args = parser.parse_args()
    steps = 1500 if args.quick else 6000
    rounds = args.rounds or (3 if args.quick else 5)
    rates = (500.0, 250.0)
    results: dict[tuple[str, float, int], list[float]] = {}
    ctx = mp.get_context('spawn')
    with ctx.Pool(2) as pool:
        pool.map(_job, [('env', 200, 500.0, 0)] * 2)  # warm up imports in both workers
        for _ in range(rounds):
            for hz in rates:
                for procs in (1, 2):
                    for kind in ('env', 'plain'):
                        rate = measure(pool, kind, steps, hz, procs, seed=17)
                        results.setdefault((kind, hz, procs), []).append(rate)
    med = {key: statistics.median(values) for key, values in results.items()}

    print(f'\nUR5 reach env throughput (RL steps/s at 25 Hz control, random actions, '
          f'median of {rounds} alternating rounds of {steps} steps per process)')
    header = f'{"physics":>8} {"procs":>5} {"env":>10} {"plain loop":>11} {"ratio":>6}'
    print(header)
    print('-' * len(header))
    for hz in rates:
        for procs in (1, 2):
            env, plain = med[('env', hz, procs)], med[('plain', hz, procs)]
            print(f'{hz:>6.0f}Hz {procs:>5} {env:>10.0f} {plain:>11.0f} {env / plain:>6.2f}')
    default_hz = rates[0]
    summary = {
        'steps_per_s_1proc': round(med[('env', default_hz, 1)], 1),
        'steps_per_s_2proc': round(med[('env', default_hz, 2)], 1),
        'ratio_vs_plain_loop': round(med[('env', default_hz, 1)]
                                     / med[('plain', default_hz, 1)], 3),
    }
    print(f'(headline: default physics {default_hz:.0f} Hz; ratio = env / plain loop, '
          f'1 process)')
    print(json.dumps(summary))


if __name__ == '__main__':
    main()
