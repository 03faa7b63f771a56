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

"""A Python dependency that is not installed is one line naming it and its install command."""

import os
import pathlib
import re
import subprocess
import sys

from async_rl_ros.core.errors import describe_missing, EXTRAS
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_package_an_extra_brings_is_named_with_its_extra():
    setup = (ROOT / 'setup.py').read_text(encoding='utf-8')
    for module, (pip_name, extra) in EXTRAS.items():
        if extra in ('learn', 'sim', 'real'):  # pinned here or in setup.py's extras
            assert re.search(rf"'{extra}': \[[^\]]*'{pip_name.split('==')[0]}", setup), module
        line = describe_missing(ModuleNotFoundError(f'No module named {module!r}', name=module))
        assert f'extra {extra!r}' in line and f"pip install '{pip_name}'" in line
        assert '\n' not in line


def test_a_module_of_the_package_itself_is_not_an_install_hint():
    exc = ModuleNotFoundError('No module named x', name='async_rl_ros.core.nothing')
    assert describe_missing(exc) is None  # a bug or a broken install: raised, not explained


def test_the_ros_modules_ask_for_the_setup_file():
    line = describe_missing(ModuleNotFoundError('No module named rclpy', name='rclpy'))
    assert "'rclpy'" in line and 'source the setup file' in line


@pytest.mark.parametrize('module, extra', [('pybullet', 'sim'), ('tensorboard', 'learn')])
def test_the_cli_without_an_extra_says_so_in_one_line(tmp_path, module, extra):
    code = (f'import sys; sys.modules[{module!r}] = None  # as if it were not installed\n'
            'from async_rl_ros.local.cli import main\n'
            "raise SystemExit(main(['--mode', 'single', '--steps', '50', '--set', "
            f"'learner.log_dir={tmp_path}']))")
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            timeout=300, env=dict(os.environ, OMP_NUM_THREADS='1'))
    lines = [x for x in result.stderr.strip().splitlines() if not x.startswith('pybullet')]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and 'Traceback' not in result.stderr, result.stderr
    assert lines[0].startswith(f"async-rl-train: the Python package '{module}' is missing "
                               f"(extra '{extra}'")
