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

"""core/ and envs/ must run without ROS: importing them never touches rclpy or messages."""

import ast
import pathlib
import subprocess
import sys

import async_rl_ros

PACKAGE = pathlib.Path(async_rl_ros.__file__).parent
ROS_LAYERS = ('core', 'envs')
ROS_MODULES = ('rclpy', 'launch', 'launch_ros', 'async_rl_ros_interfaces', 'std_msgs',
               'diagnostic_msgs', 'sensor_msgs', 'builtin_interfaces', 'rosidl_runtime_py',
               'ament_index_python')


def _modules():
    for layer in ROS_LAYERS:
        for path in sorted((PACKAGE / layer).glob('*.py')):
            name = path.stem
            yield f'async_rl_ros.{layer}' + ('' if name == '__init__' else f'.{name}'), path


def test_layers_import_with_ros_blocked():
    """Import every module of core/ and envs/ with the ROS modules made unimportable."""
    names = [name for name, _ in _modules()]
    assert len(names) >= 8, names
    script = '\n'.join([
        'import sys',
        *(f'sys.modules[{m!r}] = None' for m in ROS_MODULES),
        'import importlib',
        f'for name in {names!r}:',
        '    importlib.import_module(name)',
        'leaked = [m for m in sys.modules if m.split(".")[0] in '
        f'{ROS_MODULES!r} and sys.modules[m] is not None]',
        'assert not leaked, leaked',
        'print("ok")',
    ])
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith('ok')


def test_no_ros_import_statements():
    """Also catch imports hidden in functions, which the import test above cannot reach."""
    offenders = []
    for name, path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
            if isinstance(node, ast.Import):
                roots = [alias.name.split('.')[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                roots = [node.module.split('.')[0]]
            else:
                continue
            offenders += [f'{path.name}:{node.lineno} {r}' for r in roots if r in ROS_MODULES]
    assert not offenders, offenders
