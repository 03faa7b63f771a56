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

"""core/, envs/ and local/ run without ROS: importing them never touches rclpy or messages."""

import ast
import pathlib
import subprocess
import sys

import async_rl_ros

PACKAGE = pathlib.Path(async_rl_ros.__file__).parent
ROS_LAYERS = ('core', 'envs', 'local')
ROS_MODULES = ('rclpy', 'launch', 'launch_ros', 'async_rl_ros_interfaces', 'std_msgs',
               'diagnostic_msgs', 'sensor_msgs', 'builtin_interfaces', 'rosidl_runtime_py',
               'ament_index_python')


def _modules():
    for layer in ROS_LAYERS:  # every module, in the subpackages too
        for path in sorted((PACKAGE / layer).rglob('*.py')):
            parts = path.relative_to(PACKAGE).with_suffix('').parts
            if parts[-1] == '__init__':
                parts = parts[:-1]
            yield '.'.join(('async_rl_ros',) + parts), path


def test_layers_import_with_ros_blocked():
    """Import every module of core/, envs/ and local/ with the ROS modules unimportable."""
    names = [name for name, _ in _modules()]
    assert len(names) >= 50 and 'async_rl_ros.core.weights.receiver' in names, names
    _import_in_fresh_process(names, [f'sys.modules[{m!r}] = None' for m in ROS_MODULES], [
        'leaked = [m for m in sys.modules if m.split(".")[0] in '
        f'{ROS_MODULES!r} and sys.modules[m] is not None]',
        'assert not leaked, leaked'])


def _import_in_fresh_process(names: list[str], before: list[str], check: list[str]) -> None:
    """Import ``names`` in a new interpreter after the lines ``before``, then run ``check``."""
    script = '\n'.join(['import importlib', 'import sys', *before,
                        f'for name in {names!r}:', '    importlib.import_module(name)',
                        *check, 'print("ok")'])
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


def _imported_modules(path: pathlib.Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """
    Return ``(line, module, names)`` of every import in a file, those inside functions included.

    ``names`` are what ``from module import ...`` takes (empty for ``import module``).
    """
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module, tuple(a.name for a in node.names)))
    return out


def test_core_never_imports_the_tasks_or_the_arms():
    """core/ knows tasks through core.tasks only: no import of envs/, local/ or ros/."""
    above = ('async_rl_ros.envs', 'async_rl_ros.local', 'async_rl_ros.ros')
    offenders = [f'{path.relative_to(PACKAGE)}:{line} {module}'
                 for name, path in _modules() if name.startswith('async_rl_ros.core')
                 for line, module, _ in _imported_modules(path)
                 if module.startswith(above)]
    assert not offenders, offenders


def test_importing_the_core_loads_no_task():
    """Import every core module in a fresh process: no module of envs/ comes with them."""
    names = [name for name, _ in _modules() if name.startswith('async_rl_ros.core')]
    _import_in_fresh_process(names, [], [
        'loaded = sorted(m for m in sys.modules if m.startswith("async_rl_ros.envs"))',
        'assert not loaded, loaded'])


def _module_graph() -> dict[str, set[str]]:
    """
    Return which module of the package imports which, deferred imports included.

    ``from PKG import NAME`` counts as an import of ``PKG.NAME`` where that is a module.
    Packages (``__init__``) only hand names on and are left out: an import of one is no edge.
    """
    files = {}
    for path in sorted(PACKAGE.rglob('*.py')):
        parts = path.relative_to(PACKAGE).with_suffix('').parts
        if parts[-1] != '__init__':
            files['.'.join(('async_rl_ros',) + parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        edges = graph.setdefault(name, set())
        for _, module, names in _imported_modules(path):
            targets = [f'{module}.{n}' if f'{module}.{n}' in files else module
                       for n in names] or [module]
            edges.update(t for t in targets if t in files and t != name)
    return graph


def test_no_module_imports_itself_through_others():
    """
    The modules form layers: no circle of imports, not even through deferred imports.

    A task's rules sit below its env and its plug-in above it (``envs/ur5_tasks.py``); a
    circle would mean one of them reaches both ways.
    """
    graph = _module_graph()
    assert 'async_rl_ros.envs.reach_env' in graph['async_rl_ros.envs.ur5_tasks']
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for other in sorted(graph[name]):
            if state.get(other) == 1:
                circles.append(path[path.index(other):] + [other])
            elif other not in state:
                visit(other, path + [other])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not circles, '\n'.join(' -> '.join(c) for c in circles)
