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

"""The ROS 2 layer's static pieces, checked without ROS: entry points, topics, perspective."""

import ast
import json
import pathlib
import re
import struct

from async_rl_ros.ros import topics
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# A ROS 2 topic name: tokens of letters, digits and underscores, not starting with a digit.
TOPIC = re.compile(r'^/?([A-Za-z_][A-Za-z0-9_]*)(/[A-Za-z_][A-Za-z0-9_]*)*$')


def _console_scripts():
    tree = ast.parse((ROOT / 'setup.py').read_text(encoding='utf-8'))
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == 'console_scripts':
                    return [item.value for item in value.elts]
    raise AssertionError('no console_scripts in setup.py')


def test_every_node_is_a_console_script_with_a_main():
    scripts = dict(s.replace(' ', '').split('=') for s in _console_scripts())
    for name in ('env_worker', 'learner', 'param_server', 'policy_runner'):
        module, func = scripts[name].split(':')
        path = ROOT / (module.replace('.', '/') + '.py')
        tree = ast.parse(path.read_text(encoding='utf-8'))
        mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func]
        assert mains and [a.arg for a in mains[0].args.args] == ['args'], name
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
        assert len(classes) == 1, f'{name}: one node class per module'


@pytest.mark.parametrize('name', ['charts/episodic_return', 'losses/qf1_loss',
                                  'doctor/reward_scale/3', 'doctor/update_ratio/actor',
                                  'transport/commit ms', 'a//b'])
def test_metric_topics_are_valid_ros_names(name):
    topic = topics.metric_topic(name)
    assert topic.startswith(topics.METRICS_PREFIX) and TOPIC.match(topic), topic


def test_fixed_topic_names_are_valid():
    for name in (topics.TRANSITIONS, topics.SHARD_STATUS, topics.WORKER_STATUS,
                 topics.TRAINING_STATS, topics.DIAGNOSTICS, topics.POLICY_RUNNER_STATUS,
                 topics.weights_topic(3), topics.commits_topic(0)):
        assert TOPIC.match(name), name


def test_perspective_plots_metric_topics_and_monitors_diagnostics():
    data = json.loads((ROOT / 'config' / 'async_rl.perspective').read_text(encoding='utf-8'))
    manager = data['groups']['pluginmanager']
    running = ast.literal_eval(manager['keys']['running-plugins']['repr'])
    expected = {f'plugin__{p.replace("/", "__")}__{i}' for p, ids in running.items()
                for i in ids}
    assert set(manager['groups']) == expected
    assert 'rqt_robot_monitor/RobotMonitor' in running
    plotted = []
    for key, group in manager['groups'].items():
        if key.startswith('plugin__rqt_plot__Plot__'):
            plotted += ast.literal_eval(group['groups']['plugin']['keys']['topics']['repr'])
    wanted = ['charts/episodic_return', 'charts/success_rate', 'eval/success_rate',
              'losses/qf1_loss', 'charts/samples_per_s', 'charts/updates_per_s',
              'charts/policy_lag_mean']
    for name in wanted:
        assert topics.metric_topic(name) + '/data' in plotted, name


def _hex_bytes(value: dict) -> bytes:
    """Return the bytes of a perspective value of type ``repr(QByteArray.hex)``."""
    text = value['repr(QByteArray.hex)']
    return bytes.fromhex(text[text.index("b'") + 2:text.rindex("'")])


def test_perspective_window_fits_a_1600_by_1000_screen():
    data = json.loads((ROOT / 'config' / 'async_rl.perspective').read_text(encoding='utf-8'))
    keys = data['groups']['mainwindow']['keys']
    geometry = _hex_bytes(keys['geometry'])  # QWidget::saveGeometry(): magic, version, frame
    magic, major = struct.unpack('>IH', geometry[:6])
    assert magic == 0x1D9D0CB and major >= 2
    left, top, right, bottom = struct.unpack('>4i', geometry[8:24])
    assert 0 <= left < right < 1600 and 0 <= top < bottom < 1000, (left, top, right, bottom)
    state = _hex_bytes(keys['state'])  # QMainWindow::saveState(): every dock by object name
    manager = data['groups']['pluginmanager']
    running = ast.literal_eval(manager['keys']['running-plugins']['repr'])
    for plugin, serials in running.items():
        for serial in serials:
            name = f'{plugin.replace("/", "__")}__{serial}__'
            assert name.encode('utf-16-be') in state, name


def test_launch_file_declares_described_arguments():
    text = (ROOT / 'launch' / 'train.launch.py').read_text(encoding='utf-8')
    tree = ast.parse(text)
    declared = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, 'id', '') == \
                'DeclareLaunchArgument':
            keywords = {k.arg: k.value for k in node.keywords}
            assert 'description' in keywords, ast.unparse(node.args[0])
            declared[node.args[0].value] = keywords
    assert {'robot', 'num_workers', 'num_sim_workers', 'robot_ip', 'config', 'device',
            'num_param_shards', 'replicas', 'log_dir', 'rqt', 'skip_preflight', 'role',
            'first_worker_id'} <= set(declared)
    for name in ('robot', 'device', 'rqt', 'skip_preflight', 'role'):
        assert 'choices' in declared[name], name
    assert ast.literal_eval(declared['robot']['choices']) == ['sim', 'ur5']
    assert ast.literal_eval(declared['device']['choices']) == ['auto', 'cpu', 'cuda']
    assert ast.literal_eval(declared['role']['choices']) == ['all', 'learner', 'workers']
    assert ast.literal_eval(declared['role']['default_value']) == 'all'  # one host as before
    roles = [n for n in tree.body if isinstance(n, ast.Assign)
             and getattr(n.targets[0], 'id', '') == 'ROLES']
    assert ast.literal_eval(roles[0].value) == {
        'all': ('workers', 'learner'), 'learner': ('learner',), 'workers': ('workers',)}
