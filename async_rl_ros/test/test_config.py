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

"""Configuration: dataclass validation, the ros__parameters loader and the CLI's errors."""

import pathlib
import pickle
import re
import subprocess
import sys

from async_rl_ros.core.config import (ConfigError, EnvWorkerConfig, LearnerConfig,
                                      load_node_config, load_yaml_parameters, NODE_SECTIONS,
                                      parameters_markdown, SafetyConfig)
from async_rl_ros.local.cli import default_config_path, parse_overrides
import numpy as np
import pytest

SHIPPED = pathlib.Path(__file__).resolve().parents[1] / 'config'


def write(tmp_path, text: str) -> pathlib.Path:
    path = tmp_path / 'params.yaml'
    path.write_text(text, encoding='utf-8')
    return path


def test_defaults_validate_and_every_option_is_documented():
    EnvWorkerConfig().validate()
    names = []
    for name, _, info, _ in EnvWorkerConfig.options():
        names.append(name)
        assert info.doc.endswith('.') and len(info.doc) > 15, name
    assert 'task.control_hz' in names and 'safety.max_joint_accel' in names


def test_shipped_files_load_and_match_the_dataclass_defaults():
    # bag_qos.yaml holds QoS overrides for ros2 bag record, no node parameters
    files = sorted(p for p in SHIPPED.glob('*.yaml') if p.name != 'bag_qos.yaml')
    assert files
    for path in files:
        for node in load_yaml_parameters(path):
            section = NODE_SECTIONS[node]
            loaded = load_node_config(path, node, section).to_flat()
            defaults = section().to_flat()
            assert loaded.keys() == defaults.keys()
            for key, value in defaults.items():
                if isinstance(value, (str, bool)):
                    assert loaded[key] == value, (node, key)
                else:  # the file writes 2 pi as 6.2832
                    np.testing.assert_allclose(loaded[key], value, atol=1e-4, err_msg=key)
    assert default_config_path() == SHIPPED / 'train.yaml'


def test_parameter_reference_is_up_to_date():
    doc = SHIPPED.parents[1] / 'docs' / 'parameters.md'
    assert doc.read_text(encoding='utf-8') == parameters_markdown(NODE_SECTIONS), \
        'regenerate it: python -m async_rl_ros.core.config > docs/parameters.md'
    # Every table row has its five cells: a bar in a description (a norm) is escaped.
    rows = [line for line in parameters_markdown(NODE_SECTIONS).splitlines()
            if line.startswith('| `')]
    assert rows and all(len(re.split(r'(?<!\\)\|', row)) == 7 for row in rows)


def test_nested_and_dotted_keys_and_wildcard(tmp_path):
    path = write(tmp_path, """
/**:
  ros__parameters:
    seed: 7
    unrelated_to_this_node: 1
env_worker:
  ros__parameters:
    task:
      control_hz: 50
    task.episode_seconds: 2.0
""")
    cfg = load_node_config(path, 'env_worker', EnvWorkerConfig)
    assert cfg.seed == 7
    assert cfg.task.control_hz == 50.0 and isinstance(cfg.task.control_hz, float)
    assert cfg.task.episode_seconds == 2.0 and cfg.task.max_episode_steps == 100


@pytest.mark.parametrize('text, key, allowed', [
    ('task: {control_hz: 0.0}', 'env_worker.task.control_hz', '>= 1'),
    ('task: {control_hz: fast}', 'env_worker.task.control_hz', 'a number'),
    ('task: {contrl_hz: 25}', 'env_worker.task.contrl_hz', "did you mean 'env_worker.task"),
    ('safety: {max_joint_speed: [1, 2, 3]}', 'env_worker.safety.max_joint_speed',
     'exactly 6 numbers'),
    ('safety: {max_joint_speed: [1, 1, 1, 1, 1, 9]}', 'env_worker.safety.max_joint_speed',
     '<= 3.15'),
    ('backend: gazebo', 'env_worker.backend', "one of 'sim'"),
    ('task: {terminate_on_success: 1}', 'env_worker.task.terminate_on_success',
     'true or false'),
    ('seed: 1.5', 'env_worker.seed', 'an integer'),
    ('task: {target_low: [-0.3, 0, 0.1], target_high: [-0.6, 0.1, 0.4]}',
     'env_worker.task.target_low[x]', '< env_worker.task.target_high[x]'),
    ('task: {target_high: [-0.1, 0.1, 0.4]}', 'env_worker.task.target_high[x]',
     '<= safety.workspace_high'),
    ('manipulation: {action: joint}', 'env_worker.manipulation.action',
     "the option moved: set 'env_worker.task.action' instead"),
    ('task: {action: polar}', 'env_worker.task.action', "one of 'cartesian', 'joint'"),
])
def test_bad_values_name_the_key_and_what_is_allowed(tmp_path, text, key, allowed):
    path = write(tmp_path, 'env_worker:\n  ros__parameters:\n    '
                 + text.replace('\n', '\n    ') + '\n')
    with pytest.raises(ConfigError) as info:
        load_node_config(path, 'env_worker', EnvWorkerConfig)
    assert info.value.key == key
    assert allowed in str(info.value)
    assert str(path) in str(info.value)
    # Raised in a worker or pool process, the error reaches the parent whole.
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.key, str(copy)) == (key, str(info.value))


@pytest.mark.parametrize('section, hint', [
    ('lerner', "did you mean 'learner'?"),
    ('env_wroker', "did you mean 'env_worker'?"),
    ('trainer', "node sections: env_worker, learner, local_runner, ros_transport, '/**'"),
])
def test_a_section_that_names_no_node_is_refused_with_a_suggestion(tmp_path, section, hint):
    """A misspelled node would otherwise run on defaults without a word."""
    path = write(tmp_path, f'{section}:\n  ros__parameters:\n    total_env_steps: 100\n')
    for node, cls in (('env_worker', EnvWorkerConfig), ('learner', LearnerConfig)):
        with pytest.raises(ConfigError) as info:
            load_node_config(path, node, cls)
        assert info.value.value == section and hint in str(info.value)


@pytest.mark.parametrize('key, hint', [
    # a group that exists answers from that group, never from a close name elsewhere
    ('sac.learning_rate', "keys under 'learner.sac.': actor_lr, alpha_lr"),
    ('sac.actor_lrr', "did you mean 'learner.sac.actor_lr'?"),
    ('learning_strats', "did you mean 'learner.learning_starts'?"),
    ('sak.gamma', "did you mean 'learner.sac.gamma'?"),
])
def test_unknown_keys_get_suggestions_from_their_own_group_first(tmp_path, key, hint):
    group, _, name = key.rpartition('.')
    body = f'{group}:\n      {name}: 1\n' if group else f'{name}: 1\n'
    path = write(tmp_path, 'learner:\n  ros__parameters:\n    ' + body)
    with pytest.raises(ConfigError) as info:
        load_node_config(path, 'learner', LearnerConfig)
    assert info.value.key == f'learner.{key}'
    assert hint in str(info.value)
    assert 'learning_starts' not in str(info.value) or key == 'learning_strats'


@pytest.mark.parametrize('text', ['[1, 2]', 'env_worker: 3',
                                  'env_worker: {parameters: {seed: 1}}', 'a: [b'])
def test_malformed_files_are_refused(tmp_path, text):
    with pytest.raises(ConfigError):
        load_node_config(write(tmp_path, text), 'env_worker', EnvWorkerConfig)


def test_replace_validates():
    with pytest.raises(ConfigError, match='joint_margin'):
        SafetyConfig().replace(joint_margin=-1.0)
    assert SafetyConfig().replace(joint_margin=0.1).joint_margin == 0.1


def test_command_line_overrides_are_yaml_values():
    assert parse_overrides(['task.control_hz=50', 'sim.gui=true', 'x=[1, 2]']) == {
        'task.control_hz': 50, 'sim.gui': True, 'x': [1, 2]}
    # Only true and false are booleans: a word option takes 'off' as typed (YAML 1.1 made it
    # False, which learner.sac.compile refused).
    overrides = parse_overrides(['learner.sac.compile=off', 'a=no', 'b=False'])
    assert overrides == {'learner.sac.compile': 'off', 'a': 'no', 'b': False}
    assert LearnerConfig().replace(**{'sac.compile': overrides['learner.sac.compile'],
                                      'sac.cuda_graph': False}).sac.compile == 'off'
    with pytest.raises(ConfigError, match='--set'):
        parse_overrides(['novalue'])


@pytest.mark.parametrize('args, needle', [
    (['--set', 'task.control_hz=-3'], 'env_worker.task.control_hz = -3'),
    (['--set', 'safety.workspace_margin=big'], 'a number'),
    (['--config', '/nonexistent/params.yaml'], 'No such file'),
    (['--episodes', '0'], '--episodes'),
    (['--set', 'learner=3'], "--set = 'learner=3' is not allowed (a key inside the node"),
    # a node the command never reads: refused, not accepted and ignored
    (['--set', 'ros_transport.metrics_hz=-7'], "--set = 'ros_transport.metrics_hz=-7' is not "
     'allowed (a key of env_worker, learner, local_runner; this command reads no ros_transport '
     'section)'),
])
def test_cli_config_errors_exit_2_without_traceback(args, needle):
    result = subprocess.run([sys.executable, '-m', 'async_rl_ros.local.cli', *args],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert needle in result.stderr
    assert 'Traceback' not in result.stderr and 'Traceback' not in result.stdout


def test_cli_runs_the_scripted_policy():
    cmd = [sys.executable, '-m', 'async_rl_ros.local.cli', '--policy', 'scripted',
           '--episodes', '3']
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert 'success rate          100.0 %' in result.stdout


def test_an_unknown_key_without_a_close_match_lists_its_group_in_a_short_line():
    with pytest.raises(ConfigError) as err:
        LearnerConfig.from_flat({'sac.qqq': 1}, prefix='learner.')
    message = str(err.value)
    assert "keys under 'learner.sac.'" in message and 'gamma' in message
    assert 'replay' not in message and len(message) < 400
    with pytest.raises(ConfigError) as err:
        LearnerConfig.from_flat({'zzz': 1}, prefix='learner.')
    assert 'sac.*' in str(err.value) and 'sac.gamma' not in str(err.value)


def test_a_non_utf8_or_empty_file_is_one_clear_error(tmp_path):
    latin = tmp_path / 'latin1.yaml'
    latin.write_bytes('env_worker:\n  ros__parameters:\n    seed: 1  # caf\xe9\n'
                      .encode('latin-1'))
    with pytest.raises(ConfigError, match='UTF-8') as info:
        load_node_config(latin, 'env_worker', EnvWorkerConfig)
    assert str(latin) in str(info.value) and '0xe9' in str(info.value)
    for text in ('', '# only a comment\n'):
        with pytest.raises(ConfigError, match='holds none') as info:
            load_node_config(write(tmp_path, text), 'env_worker', EnvWorkerConfig)
        assert 'params.yaml' in str(info.value)


def test_integer_lists_stay_integers_and_reject_fractions():
    cfg = LearnerConfig().replace(**{'sac.hidden_sizes': [64, 32]})
    assert cfg.sac.hidden_sizes == [64, 32]
    assert all(type(h) is int for h in cfg.sac.hidden_sizes)
    with pytest.raises(ConfigError, match='sac.hidden_sizes'):
        LearnerConfig().replace(**{'sac.hidden_sizes': [64.5]})


def test_the_update_to_data_cap_is_at_least_both_floors():
    for floor in ('updates_per_step', 'min_updates_per_step'):
        with pytest.raises(ConfigError, match='max_updates_per_step.*min_updates_per_step'):
            LearnerConfig().replace(**{floor: 5.0})
    assert LearnerConfig().replace(min_updates_per_step=0.25).min_updates_per_step == 0.25


def test_a_replay_buffer_that_can_never_start_learning_is_refused():
    """The first update waits for max(learning_starts, initial batch) stored transitions."""
    with pytest.raises(ConfigError, match=r'replay.capacity = 999 .*learning_starts = 1000'):
        LearnerConfig().replace(**{'replay.capacity': 999})
    with pytest.raises(ConfigError, match=r'replay.capacity = 300 .*initial_batch = 512'):
        LearnerConfig().replace(**{'replay.capacity': 300, 'learning_starts': 100,
                                   'batch.initial_batch': 512})
    assert LearnerConfig().replace(**{'replay.capacity': 1000}).replay.capacity == 1000


@pytest.mark.parametrize('address', ['192.168.1.102', '::1', 'fe80::1', 'ur5', 'ur5-b.lab.'])
def test_the_controller_is_an_address_or_a_host_name(address):
    assert EnvWorkerConfig().replace(**{'rtde.robot_ip': address}).rtde.robot_ip == address


@pytest.mark.parametrize('address', ['', '999.1.1.1', '192.168.1', 'a b', '-ur5', 'ur5_a',
                                     'http://192.168.1.102'])
def test_a_controller_address_that_is_neither_is_refused(address):
    with pytest.raises(ConfigError, match=r'^rtde\.robot_ip = .* is not allowed \(an IPv4 or '):
        EnvWorkerConfig().replace(**{'rtde.robot_ip': address})


def test_a_bad_command_line_value_is_not_blamed_on_the_file(tmp_path):
    """``--set learner.seed=-3`` over train.yaml: the file holds no such value."""
    from async_rl_ros.core.config import load_node_config

    path = tmp_path / 'train.yaml'
    path.write_text('learner:\n  ros__parameters:\n    seed: 7\n', encoding='utf-8')
    with pytest.raises(ConfigError) as given:
        load_node_config(path, 'learner', LearnerConfig, {'seed': -3})
    assert str(given.value).startswith('learner.seed = -3 is not allowed')
    path.write_text('learner:\n  ros__parameters:\n    seed: -7\n', encoding='utf-8')
    with pytest.raises(ConfigError) as in_file:
        load_node_config(path, 'learner', LearnerConfig, {'sac.gamma': 0.9})
    assert str(in_file.value).startswith(f'{path}: learner.seed = -7 is not allowed')
