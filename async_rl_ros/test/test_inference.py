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

"""Inference fit for a control loop, the step budget, and the real-time set-up (no robot)."""

import logging
import os

from async_rl_ros.core.learning.networks import PolicyForExport
from async_rl_ros.core.workers import realtime
from async_rl_ros.core.workers.env_worker import WorkerPolicy
from async_rl_ros.core.workers.inference import FittedPolicy, WARMUP_CALLS
from async_rl_ros.core.workers.step_budget import StepBudget
import numpy as np
import pytest
import torch


@pytest.fixture
def threads():
    """Give torch its thread count back (the set-up under test is process-wide)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


class Counting(torch.nn.Module):

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.register_buffer('calls', torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return torch.tanh(self.layer(x))


def test_an_exported_policy_is_frozen_warmed_up_and_on_one_thread(threads):
    torch.set_num_threads(2)
    scripted = torch.jit.script(PolicyForExport(21, 6, (16, 16)))
    policy = FittedPolicy(scripted, 21)
    assert torch.get_num_threads() == 1
    assert policy.frozen and isinstance(policy.module, torch.jit.ScriptModule)
    assert policy.warm_ms > 0.0 and policy.first_action_ms is None
    obs = np.linspace(-1.0, 1.0, 21)
    action = policy(obs)
    expected = scripted(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0))[0]
    np.testing.assert_allclose(action, expected.detach().numpy(), atol=1e-6)
    summary = policy.summary()
    assert summary['first_action_ms'] is not None and summary['policy_ms']['n'] == 1


def test_the_warm_up_runs_before_the_first_action_and_leaves_the_rng_alone(threads):
    module = Counting()
    rng = torch.get_rng_state()
    policy = FittedPolicy(module, 4, threads=None)
    assert torch.equal(torch.get_rng_state(), rng)
    assert int(module.calls) == WARMUP_CALLS + 1 and not policy.frozen
    policy(np.zeros(4))
    assert int(module.calls) == WARMUP_CALLS + 2


def test_the_workers_policy_is_timed_and_fit_for_control(threads):
    torch.set_num_threads(2)
    policy = WorkerPolicy(21, 6, (16, 16), seed=3)
    assert policy.warm_ms > 0.0
    rng = torch.get_rng_state()
    policy.fit_for_control()   # warms up again: without a draw from the global generator
    assert torch.get_num_threads() == 1 and torch.equal(torch.get_rng_state(), rng)
    budget = StepBudget(0.04)
    budget.observed(due=10.0, now=10.001)
    policy.act(np.zeros(21, dtype=np.float32))
    ms = budget.commanded(now=10.003, command_s=0.0005)
    assert ms == pytest.approx(3.0)
    summary = budget.summary()
    assert summary['phase_ms']['policy']['n'] == 1 and summary['first_action_ms'] is not None
    assert policy.latency.count == 1 and policy.first_action_ms is not None
    assert summary['phase_ms']['observation']['p50'] == pytest.approx(1.0)


def test_a_late_step_is_counted_under_its_longest_phase():
    budget = StepBudget(0.008)
    budget.observed(due=1.0, now=1.0005)
    budget.commanded(now=1.002, command_s=0.001)      # 2 ms: in time
    budget.observed(due=2.0, now=2.009)               # woke 9 ms late
    budget.commanded(now=2.010, command_s=0.0005)
    budget.observed(due=3.0, now=3.0)
    budget.missed('stale')
    summary = budget.summary()
    assert summary['step_ms']['n'] == 2 and summary['deadline_misses'] == {
        'observation': 1, 'stale': 1}
    assert summary['first_action_ms'] is None   # no policy acted


def test_cpu_plan_keeps_one_core_for_the_arm_from_four_up():
    assert realtime.cpu_plan([0, 1]) == realtime.CpuPlan(None, None, 1)
    plan = realtime.cpu_plan(list(range(8)))
    assert plan.arm == {7} and plan.learner == set(range(7)) and plan.learner_threads == 7


def test_a_refused_priority_is_one_clear_line_and_normal_scheduling(monkeypatch, caplog):
    def refuse(*_):
        raise PermissionError(1, 'Operation not permitted')

    monkeypatch.setattr(os, 'sched_setscheduler', refuse)
    monkeypatch.setattr(realtime, '_told', set())
    thread = realtime.ControlThread(30)
    with caplog.at_level(logging.WARNING):
        thread.enter()
        thread.enter()
    assert thread.got['priority'] == 0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and 'normal priority' in lines[0] and 'not permitted' in lines[0]
    assert 'ulimit -r' in lines[0]
    thread.restore()


def test_no_priority_asked_leaves_the_thread_as_it_was():
    thread = realtime.ControlThread(0)
    before = os.sched_getscheduler(0)
    thread.enter()
    assert thread.got['priority'] == 0 and os.sched_getscheduler(0) == before
    thread.restore()


def test_loop_health_warns_on_new_misses_and_refused_priorities():
    from async_rl_ros.core.workers.step_budget import loop_health, StepBudget

    summary = {**StepBudget(0.04).summary(),
               'realtime': {'client_priority': 40, 'control_priority': 30, 'refused': None}}
    level, _, values, misses = loop_health(summary, 0)
    assert (level, misses) == ('ok', 0) and values['deadline_ms'] == 40.0
    summary['deadline_misses'] = {'policy': 2, 'command': 1}
    level, message, values, misses = loop_health(summary, 0)
    assert (level, misses) == ('warn', 3) and message.startswith('3 control steps')
    assert values['misses_policy'] == 2 and values['client_priority'] == 40
    assert loop_health(summary, misses)[0] == 'ok'  # no new miss since the last report
    summary['realtime']['refused'] = 'the OS refused SCHED_FIFO priority 40'
    level, message, _, _ = loop_health(summary, misses)
    assert level == 'warn' and 'refused' in message


def test_loop_health_shows_interruptions_and_the_cube_poses_of_a_physical_cell():
    from async_rl_ros.core.workers.step_budget import loop_health, StepBudget

    summary = {**StepBudget(0.04).summary(), 'interruptions': {'policy gate': 2},
               'object_pose': {'received': 90, 'refused': {'frame': 3, 'future stamp': 1}}}
    _, _, values, _ = loop_health(summary, 0)
    assert values['interrupted_policy_gate'] == 2
    assert values['object_pose_received'] == 90
    assert values['object_pose_refused_frame'] == 3
    assert values['object_pose_refused_future_stamp'] == 1
