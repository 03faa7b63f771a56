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

from conftest import require_linter, SCRIPTS
import pytest


@pytest.mark.flake8
@pytest.mark.linter
def test_flake8():
    main_with_errors = require_linter('ament_flake8.main').main_with_errors
    rc, errors = main_with_errors(argv=[])
    assert rc == 0, 'Found %d code style errors / warnings:\n' % len(errors) + '\n'.join(errors)


@pytest.mark.flake8
@pytest.mark.linter
@pytest.mark.skipif(not SCRIPTS, reason='not in a source checkout (no bench/ or tools/)')
def test_flake8_of_the_benches_and_tools():
    main_with_errors = require_linter('ament_flake8.main').main_with_errors
    rc, errors = main_with_errors(argv=[str(d) for d in SCRIPTS])
    assert rc == 0, 'Found %d code style errors / warnings:\n' % len(errors) + '\n'.join(errors)
