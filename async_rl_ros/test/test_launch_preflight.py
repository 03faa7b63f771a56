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
``ros2 launch ... robot:=ur5`` with no controller: nothing starts and the exit status says so.

Skipped without ROS 2 and without the package installed in a sourced workspace
(``make ros-test`` builds one).
"""

import os
import shutil
import subprocess

import pytest

pytest.importorskip('launch')
pytest.importorskip('launch_ros')


def test_a_failed_preflight_ends_the_launch_with_a_non_zero_status(tmp_path):
    try:
        from ament_index_python.packages import get_package_share_directory
        get_package_share_directory('async_rl_ros')
    except (ImportError, LookupError):
        pytest.skip('async_rl_ros is not installed in a sourced ROS 2 workspace')
    if shutil.which('ros2') is None:
        pytest.skip('no ros2 command')
    env = dict(os.environ, ROS_DOMAIN_ID=os.environ.get('ROS_DOMAIN_ID', '63'))
    # 127.0.0.1: no controller listens there, the preflight fails at once.
    proc = subprocess.run(['ros2', 'launch', 'async_rl_ros', 'train.launch.py', 'robot:=ur5',
                           'robot_ip:=127.0.0.1', f'log_dir:={tmp_path}'],
                          capture_output=True, text=True, timeout=120, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert 'preflight of 127.0.0.1 failed' in out and 'nothing started' in out, out
    started = [line for line in out.splitlines() if 'process started' in line]
    assert all('preflight' in line for line in started), started  # no node started
