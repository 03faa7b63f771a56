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

"""The ROS 2 package metadata is valid and agrees with setup.py."""

import pathlib
import re

import async_rl_ros
from conftest import require_linter

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_package_xml_is_valid_format_3():
    parse_package = require_linter('catkin_pkg.package').parse_package
    package = parse_package(str(ROOT / 'package.xml'))
    package.validate()
    assert package.package_format == 3
    assert package.name == 'async_rl_ros'
    assert package.get_build_type() == 'ament_python'
    assert package.version == async_rl_ros.__version__
    setup_py = (ROOT / 'setup.py').read_text(encoding='utf-8')
    assert f"version='{package.version}'" in setup_py
    assert re.search(r"package_name = 'async_rl_ros'", setup_py)


def test_layout_of_an_ament_python_package():
    for path in ('package.xml', 'setup.py', 'setup.cfg', 'resource/async_rl_ros',
                 'async_rl_ros/__init__.py', 'launch', 'config', 'test'):
        assert (ROOT / path).exists(), path
    setup_cfg = (ROOT / 'setup.cfg').read_text(encoding='utf-8')
    assert 'install_scripts=$base/lib/async_rl_ros' in setup_cfg
    setup_py = (ROOT / 'setup.py').read_text(encoding='utf-8')
    for share in ("'/launch'", "'/config'", "'share/ament_index/resource_index/packages'"):
        assert share in setup_py
