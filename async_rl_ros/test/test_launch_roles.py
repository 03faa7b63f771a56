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
With ``launch_ros`` (skipped without ROS 2): what each ``role`` of train.launch.py starts.

The launch description is built, not run: its arguments are resolved in a launch context and
the node actions of every role are read (executable, namespace). No process starts.
"""

import importlib.util
import pathlib

import pytest

pytest.importorskip('launch_ros')
pytest.importorskip('lifecycle_msgs.msg')

from launch import LaunchContext  # noqa: E402, I100 -- after importorskip
from launch.actions import DeclareLaunchArgument, ExecuteProcess  # noqa: E402
from launch.actions import RegisterEventHandler  # noqa: E402
from launch.utilities import perform_substitutions  # noqa: E402
from launch_ros.actions import Node  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAUNCH = ROOT / 'launch' / 'train.launch.py'
CONFIG = ROOT / 'config' / 'train.yaml'


def _module():
    spec = importlib.util.spec_from_file_location('train_launch', LAUNCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _started(**arguments):
    """Return ``(executable, namespace)`` of every node the launch file starts, and the rest."""
    module = _module()
    context = LaunchContext()
    for action in module.generate_launch_description().entities:
        if isinstance(action, DeclareLaunchArgument):
            context.launch_configurations[action.name] = perform_substitutions(
                context, action.default_value) if action.name != 'config' else str(CONFIG)
    context.launch_configurations.update({k: str(v) for k, v in arguments.items()})
    nodes, other = [], []
    for action in module._launch_setup(context):
        if isinstance(action, Node):
            nodes.append((action.node_executable, action._Node__node_namespace))
        else:
            other.append(action)
    return sorted(nodes, key=str), other


def _workers(ids):
    return [('env_worker', f'worker_{i}') for i in ids]


LEARNER = [('learner', None), ('param_server', None), ('param_server', None)]


def test_role_all_is_the_default_and_starts_everything():
    nodes, _ = _started()
    assert nodes == sorted(_workers([0, 1]) + LEARNER, key=str)
    assert _started(role='all', num_workers=3)[0] == sorted(_workers([0, 1, 2]) + LEARNER,
                                                            key=str)


def test_role_learner_starts_the_learner_and_every_shard_only():
    nodes, other = _started(role='learner', num_param_shards=3)
    assert nodes == [('learner', None)] + [('param_server', None)] * 3
    assert not [a for a in other if isinstance(a, RegisterEventHandler)]  # no bring-up
    # a learner host with a real arm on a worker host: no preflight here
    nodes, other = _started(role='learner', robot='ur5')
    assert nodes == LEARNER and not other


def test_role_workers_starts_workers_from_first_worker_id_only():
    nodes, other = _started(role='workers', num_workers=3, first_worker_id=4)
    assert nodes == _workers([4, 5, 6])
    assert len([a for a in other if isinstance(a, RegisterEventHandler)]) == 3  # bring-ups


def test_role_workers_with_the_arm_runs_its_preflight_first():
    nodes, other = _started(role='workers', robot='ur5', num_sim_workers=1, first_worker_id=2)
    assert nodes == []  # everything waits for the preflight
    assert [perform_substitutions(LaunchContext(), a.name) for a in other
            if isinstance(a, ExecuteProcess)] == ['preflight']
    nodes, _ = _started(role='workers', robot='ur5', num_sim_workers=1, first_worker_id=2,
                        skip_preflight='true')
    assert nodes == _workers([2, 3])


def test_roles_match_the_declared_choices():
    module = _module()
    declared = {a.name: a for a in module.generate_launch_description().entities
                if isinstance(a, DeclareLaunchArgument)}
    assert declared['role'].choices == list(module.ROLES) == ['all', 'learner', 'workers']
