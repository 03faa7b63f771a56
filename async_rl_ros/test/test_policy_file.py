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

"""The exported policy file: its manifest, and what a file that does not fit gets."""

import json
import logging
import zipfile

from async_rl_ros.core import policy_file
from async_rl_ros.core.config import LearnerConfig
from async_rl_ros.core.learning.artifacts import export_policy
from async_rl_ros.core.learning.learner import Learner
from async_rl_ros.core.policy_file import (load_policy_file, PolicyFileError, PolicyManifest,
                                           read_manifest, save_policy_file)
from async_rl_ros.core.workers.inference import FittedPolicy
import numpy as np
import pytest
import torch


def exported(tmp_path, task='push', obs_dim=25, act_dim=4, name='policy.pt'):
    """Export the policy of a fresh learner (hidden sizes 16, 16) of ``task``."""
    cfg = LearnerConfig().replace(**{'sac.hidden_sizes': [16, 16],
                                     'checkpoint.directory': str(tmp_path / 'ckpt')})
    learner = Learner(cfg, obs_dim, act_dim, task=task)
    learner.env_steps, learner.policy_version = 1234, 56
    return export_policy(learner, None, tmp_path / name), learner


@pytest.fixture
def no_torch_load(monkeypatch):
    """Fail a test that lets torch read a file the manifest should have refused."""
    def refuse(*args, **kwargs):
        raise AssertionError('torch.jit.load ran on a file that should have been refused')
    monkeypatch.setattr(policy_file.torch.jit, 'load', refuse)


def test_the_export_carries_its_task_widths_and_version_and_acts_as_the_learner(tmp_path):
    path, learner = exported(tmp_path)
    assert read_manifest(path) == PolicyManifest(task='push', obs_dim=25, act_dim=4,
                                                 policy_version=56, env_steps=1234)
    module, manifest = load_policy_file(path, 'push', 25, 4)
    assert manifest.task == 'push'
    obs = torch.randn(3, 25)
    expected = learner.export_policy(evaluated=True)(obs)
    assert torch.allclose(module(obs), expected, atol=1e-6)
    policy = FittedPolicy.load(str(path), 'push', 25, 4, threads=None)
    action = policy(np.zeros(25, np.float32))
    assert action.shape == (4,) and np.all(np.abs(action) <= 1.0)


@pytest.mark.parametrize('task, obs_dim, act_dim, needle', [
    ('reach', 25, 4, "exported for task 'push', not for the task 'reach'"),
    ('push', 21, 4, 'obs_dim = 25 does not fit the environment (21)'),
    ('push', 25, 3, 'act_dim = 4 does not fit the environment (3)'),
])
def test_a_policy_of_another_task_or_widths_is_refused_before_torch_reads_it(
        tmp_path, no_torch_load, task, obs_dim, act_dim, needle):
    path, _ = exported(tmp_path)
    with pytest.raises(PolicyFileError) as info:
        load_policy_file(path, task, obs_dim, act_dim)
    assert needle in str(info.value) and str(path) in str(info.value)
    assert '\n' not in str(info.value)


def rewrite_manifest(path, text):
    """Return a copy of the archive at ``path`` with its manifest's text replaced."""
    out = path.with_name('edited.pt')
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, 'w') as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith('/extra/policy.json'):
                data = text.encode('utf-8') if isinstance(text, str) else text
            dst.writestr(info, data)
    return out


def manifest_text(**changes):
    data = {'format': policy_file.FORMAT, 'task': 'push', 'obs_dim': 25, 'act_dim': 4,
            'policy_version': 56, 'env_steps': 1234}
    data.update(changes)
    return json.dumps({k: v for k, v in data.items() if v is not None})


@pytest.mark.parametrize('case, needle', [
    ('missing', 'cannot be read'),
    ('a folder', 'is not a policy file'),
    ('text', 'is not a TorchScript archive'),
    ('truncated', 'is not a TorchScript archive'),
    ('a zip of something else', 'is not a TorchScript archive (no data.pkl)'),
    ('too large', 'is not a policy file (a file of at most'),
    ('manifest not JSON', 'its manifest is not JSON'),
    ('another format', "manifest format 'async_rl_ros.policy/0' is not allowed"),
    ('a width of 0', 'manifest field obs_dim = 0 is not allowed'),
    ('a width as text', "manifest field act_dim = '4' is not allowed"),
    ('no task', 'manifest field task = None is not allowed'),
    ('a huge manifest', 'its manifest is'),
])
def test_what_is_not_a_policy_file_is_named_in_one_line(tmp_path, no_torch_load, monkeypatch,
                                                        case, needle):
    path, _ = exported(tmp_path)
    if case == 'missing':
        path = tmp_path / 'nothing.pt'
    elif case == 'a folder':
        path = tmp_path
    elif case == 'text':
        path.write_text('not a policy\n')
    elif case == 'truncated':
        path.write_bytes(path.read_bytes()[:1000])
    elif case == 'a zip of something else':
        with zipfile.ZipFile(path, 'w') as archive:
            archive.writestr('x/extra/policy.json', manifest_text())
    elif case == 'too large':
        monkeypatch.setattr(policy_file, 'MAX_BYTES', path.stat().st_size - 1)
    elif case == 'manifest not JSON':
        path = rewrite_manifest(path, b'\xff{')
    elif case == 'another format':
        path = rewrite_manifest(path, manifest_text(format='async_rl_ros.policy/0'))
    elif case == 'a width of 0':
        path = rewrite_manifest(path, manifest_text(obs_dim=0))
    elif case == 'a width as text':
        path = rewrite_manifest(path, manifest_text(act_dim='4'))
    elif case == 'no task':
        path = rewrite_manifest(path, manifest_text(task=None))
    elif case == 'a huge manifest':
        path = rewrite_manifest(path, manifest_text(pad='x' * 100_000))
    with pytest.raises(PolicyFileError) as info:
        load_policy_file(path, 'push', 25, 4)
    message = str(info.value)
    assert needle in message and '\n' not in message, message


def test_a_policy_exported_before_manifests_loads_with_a_warning(tmp_path, caplog):
    cfg = LearnerConfig().replace(**{'sac.hidden_sizes': [16, 16]})
    learner = Learner(cfg, 21, 3)  # no task name: no manifest, as before manifests existed
    path = export_policy(learner, None, tmp_path / 'old.pt')
    assert read_manifest(path) is None
    with caplog.at_level(logging.WARNING):
        module, manifest = load_policy_file(path, 'reach', 21, 3)
    assert manifest is None and 'has no manifest' in caplog.text
    assert module(torch.zeros(1, 21)).shape == (1, 3)
    # Its widths are still checked, by the warm-up.
    with pytest.raises(PolicyFileError, match='does not act in task'):
        FittedPolicy.load(str(path), 'push', 25, 4, threads=None)


class WrongWidth(torch.nn.Module):

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.zeros(obs.shape[0], 2)


class NotFinite(torch.nn.Module):

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.full((obs.shape[0], 4), float('nan'))


@pytest.mark.parametrize('module, needle', [
    (WrongWidth(), 'returns actions of shape (1, 2), the task takes (1, 4)'),
    (NotFinite(), 'returns non-finite actions'),
])
def test_a_policy_whose_actions_do_not_fit_is_refused(tmp_path, module, needle):
    path = tmp_path / 'odd.pt'
    save_policy_file(torch.jit.script(module), path, PolicyManifest(
        task='push', obs_dim=25, act_dim=4, policy_version=1, env_steps=1))
    with pytest.raises(PolicyFileError) as info:
        FittedPolicy.load(str(path), 'push', 25, 4, threads=None)
    assert needle in str(info.value) and str(path) in str(info.value)
