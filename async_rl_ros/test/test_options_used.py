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
Every documented option is read by the code that runs, and every shipped file's key exists.

An option nobody reads is accepted and ignored -- worse than a missing one. This test parses
the package and requires, for every option of every node section, a read of the option's
name as an attribute (``cfg.sac.gamma``) or as a dotted key in code other than its own
declaration. It is a static guard: the behaviour of the options is tested where it lives
(``test_live_config``, ``test_local_runner``, ``test_sac`` ...).
"""

import ast
import pathlib

from async_rl_ros.core.config import NODE_SECTIONS
from async_rl_ros.core.param_file import load_yaml_parameters
from async_rl_ros.local.cli import default_config_path

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'async_rl_ros'
LAUNCH = pathlib.Path(__file__).resolve().parents[1] / 'launch'


def _reads() -> set[str]:
    """Return every attribute name read and every dotted-key leaf in strings, off declarations."""
    names: set[str] = set()
    for path in [*PACKAGE.rglob('*.py'), *LAUNCH.glob('*.py')]:
        tree = ast.parse(path.read_text(encoding='utf-8'))
        declared = set()
        for node in ast.walk(tree):  # `name: type = option(...)`: a declaration, not a read
            if (isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, 'id', '') == 'option'):
                declared.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            if id(node) in declared:
                continue
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value.rsplit('.', 1)[-1])
    return names


def test_every_option_is_read_somewhere():
    reads = _reads()
    unread = [f'{node}.{name}' for node, cls in NODE_SECTIONS.items()
              for name, *_ in cls.options() if name.rsplit('.', 1)[-1] not in reads]
    assert not unread, f'options accepted but never read: {unread}'


def test_every_key_of_the_shipped_file_is_an_option():
    nodes = load_yaml_parameters(default_config_path())
    for node, values in nodes.items():
        known = {name for name, *_ in NODE_SECTIONS[node].options()}
        assert set(values) <= known, sorted(set(values) - known)
