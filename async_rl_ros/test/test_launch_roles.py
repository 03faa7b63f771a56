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
the node actions of every role are read (executable, namespace, parameters). No process
starts.
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
import yaml  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAUNCH = ROOT / 'launch' / 'train.launch.py'
CONFIG = ROOT / 'config' / 'train.yaml'


def _module():
    spec = importlib.util.spec_from_file_location('train_launch', LAUNCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _setup(**arguments) -> list:
    """Return the actions the launch file returns for ``arguments`` (the rest: defaults)."""
    module = _module()
    context = LaunchContext()
    for action in module.generate_launch_description().entities:
        if isinstance(action, DeclareLaunchArgument):
            context.launch_configurations[action.name] = perform_substitutions(
                context, action.default_value) if action.name != 'config' else str(CONFIG)
    context.launch_configurations.update({k: str(v) for k, v in arguments.items()})
    return module._launch_setup(context)


def _started(**arguments):
    """Return ``(executable, namespace)`` of every node the launch file starts, and the rest."""
    nodes, other = [], []
    for action in _setup(**arguments):
        if isinstance(action, Node):
            nodes.append((action.node_executable, action._Node__node_namespace))
        else:
            other.append(action)
    return sorted(nodes, key=str), other


def _parameters(**arguments) -> dict:
    """Return ``{executable: {parameter: value}}`` of the nodes started (the last of each)."""
    context = LaunchContext()
    out = {}
    for action in _setup(**arguments):
        if isinstance(action, Node):
            values = out[action.node_executable] = {}
            for entry in action._Node__parameters:  # launch_ros's normalized dictionaries
                values.update({perform_substitutions(context, list(key)): value
                               for key, value in entry.items()})
    return out


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


def test_nodes_get_the_task_defaults_under_the_file_and_the_file_whole(tmp_path):
    for task, width, budget in (('reach', (128, 128), 20000), ('push', (256, 256), 100000)):
        nodes = _parameters(task=task)
        learner, worker = nodes['learner'], nodes['env_worker']
        assert tuple(learner['sac.hidden_sizes']) == width, task
        assert learner['total_env_steps'] == budget, task
        assert tuple(worker['hidden_sizes']) == width, task  # the workers' actor
        # launch_ros keeps a string parameter as substitutions of its YAML text
        assert yaml.safe_load(perform_substitutions(LaunchContext(),
                                                    list(worker['task.name']))) == task
    # The file wins over the task's defaults, and its /** section reaches every node.
    text = CONFIG.read_text(encoding='utf-8').replace('    seed: 0\n', '').replace(
        '      gamma: 0.99\n', '      gamma: 0.99\n      hidden_sizes: [64, 64]\n')
    own = tmp_path / 'own.yaml'
    own.write_text(text + '\n/**:\n  ros__parameters:\n    seed: 7\n', encoding='utf-8')
    nodes = _parameters(task='push', config=own)
    assert tuple(nodes['learner']['sac.hidden_sizes']) == (64, 64)
    assert nodes['learner']['total_env_steps'] == 100000
    assert tuple(nodes['env_worker']['hidden_sizes']) == (64, 64)
    assert nodes['learner']['seed'] == 7 and nodes['env_worker']['seed'] == 7


def test_more_workers_than_free_memory_holds_stop_the_launch_before_any_node(monkeypatch):
    """``num_workers:=1000`` by a typo: one line, not the out-of-memory killer."""
    import psutil
    from types import SimpleNamespace

    monkeypatch.setattr(psutil, 'virtual_memory',
                        lambda: SimpleNamespace(available=4 * 2**30))  # 16 child processes
    with pytest.raises(ValueError, match=r'^num_workers = 1000 is not allowed \(<= 13 on this'):
        _setup(num_workers=1000)  # beside the learner and its 2 shards
    with pytest.raises(ValueError, match=r'^num_sim_workers = 100 is not allowed \(<= 15 on '):
        _setup(role='workers', robot='ur5', num_sim_workers=100)  # beside the arm's worker
    assert len(_started(num_workers=13)[0]) == 13 + len(LEARNER)
