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
The exported policy file (``policy.pt``): TorchScript with a manifest, checked before it loads.

The learner exports its best evaluated policy as a TorchScript module (deterministic actions,
the observation normalization inside). The archive also carries a manifest,
``extra/policy.json`` (:class:`PolicyManifest`): the task the policy learned, its observation
and action widths, its policy version and the env steps it had seen. Whatever plays a policy
file back (``async-rl-train --policy FILE``, the ROS ``policy_runner``) calls
:func:`load_policy_file`, which reads the manifest straight from the zip archive before torch
reads anything, and refuses, with one line naming what does not fit, a file that is too large,
not a TorchScript archive, has a manifest that does not parse, or was exported for another task
or other widths. A file exported before the manifest existed loads with a warning; its widths
are then checked by the policy's warm-up alone (:class:`~async_rl_ros.core.workers.inference.
FittedPolicy`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
import zipfile

from async_rl_ros.core.errors import first_line
import torch

__all__ = ['PolicyManifest', 'PolicyFileError', 'save_policy_file', 'read_manifest',
           'load_policy_file', 'MANIFEST', 'FORMAT', 'MAX_BYTES']

_LOG = logging.getLogger(__name__)
MANIFEST = 'policy.json'            #: the manifest's name among the archive's extra files
FORMAT = 'async_rl_ros.policy/1'    #: the manifest's format, bumped when its fields change
MAX_BYTES = 64 * 2**20              #: largest policy file loaded (a [256, 256] actor: 0.3 MB)
_MAX_MANIFEST_BYTES = 64 * 2**10


class PolicyFileError(ValueError):
    """A policy file is missing, unreadable or does not fit the task (one-line message)."""


@dataclasses.dataclass(frozen=True)
class PolicyManifest:
    """What an exported policy is for, stored beside its weights."""

    task: str             #: the task it learned (``TaskSpec.name``: ``push``, ``gym:ID`` ...)
    obs_dim: int          #: observation width it takes
    act_dim: int          #: action width it returns (actions in [-1, 1])
    policy_version: int   #: the learner's policy version it was exported from
    env_steps: int        #: env steps the learner had seen when that policy was evaluated

    def to_json(self) -> str:
        """Return the manifest as the JSON text stored in the archive."""
        return json.dumps({'format': FORMAT, **dataclasses.asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> 'PolicyManifest':
        """
        Parse and check a manifest.

        :param raw: the stored text.
        :param where: the file, for the error message.
        :raises PolicyFileError: not this format, or a field missing or of the wrong kind.
        """
        try:
            data = json.loads(raw.decode('utf-8'))
        except (UnicodeDecodeError, ValueError) as exc:
            raise PolicyFileError(f'{where}: its manifest is not JSON ({exc})') from None
        if not isinstance(data, dict) or data.get('format') != FORMAT:
            found = data.get('format') if isinstance(data, dict) else type(data).__name__
            raise PolicyFileError(f'{where}: manifest format {found!r} is not allowed '
                                  f'({FORMAT!r})')
        fields = {}
        for field in dataclasses.fields(cls):
            value = data.get(field.name)
            if field.type == 'str':
                ok = isinstance(value, str) and 0 < len(value) <= 256
            else:
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
                ok = ok and (value >= 1 or field.name not in ('obs_dim', 'act_dim'))
            if not ok:
                allowed = 'a task name' if field.type == 'str' else 'an integer >= 0'
                raise PolicyFileError(f'{where}: manifest field {field.name} = {value!r} is not '
                                      f'allowed ({allowed})')
            fields[field.name] = value
        return cls(**fields)


def save_policy_file(module: torch.jit.ScriptModule, path: str | Path,
                     manifest: PolicyManifest | None) -> None:
    """Write a scripted policy with its manifest (``None``: none) to ``path``."""
    extra = {MANIFEST: manifest.to_json()} if manifest is not None else {}
    module.save(str(path), _extra_files=extra)


def read_manifest(path: str | Path) -> PolicyManifest | None:
    """
    Return a policy file's manifest, read from its zip archive without loading the policy.

    :returns: ``None`` for a TorchScript archive without one (exported before manifests).
    :raises PolicyFileError: no such file, too large, not a TorchScript archive, a bad manifest.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise PolicyFileError(f'{path}: cannot be read ({exc.strerror or exc})') from None
    if not path.is_file() or size > MAX_BYTES:
        raise PolicyFileError(f'{path}: is not a policy file (a file of at most '
                              f'{MAX_BYTES // 2**20} MiB, as async-rl-train exports)')
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if not any(n.count('/') == 1 and n.endswith('/data.pkl') for n in names):
                raise PolicyFileError(f'{path}: is not a TorchScript archive (no data.pkl)')
            found = [n for n in names if n.count('/') == 2 and n.endswith('/extra/' + MANIFEST)]
            if not found:
                return None
            info = archive.getinfo(found[0])
            if info.file_size > _MAX_MANIFEST_BYTES:
                raise PolicyFileError(f'{path}: its manifest is {info.file_size} bytes (at '
                                      f'most {_MAX_MANIFEST_BYTES})')
            raw = archive.read(info)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise PolicyFileError(f'{path}: is not a TorchScript archive ({exc})') from None
    return PolicyManifest.from_json(raw, str(path))


def load_policy_file(path: str | Path, task: str, obs_dim: int, act_dim: int
                     ) -> tuple[torch.jit.ScriptModule, PolicyManifest | None]:
    """
    Check a policy file against the task it is to act in, then load it onto the CPU.

    :param path: the exported file (``<run>/policy.pt``).
    :param task: the task's name (``TaskSpec.name``) the environment runs.
    :param obs_dim: the environment's observation width.
    :param act_dim: its action width.
    :returns: the loaded module and its manifest (``None`` for a file without one).
    :raises PolicyFileError: see :func:`read_manifest`; the manifest names another task or
        other widths; torch cannot load the archive.
    """
    manifest = read_manifest(path)
    if manifest is None:
        _LOG.warning('%s has no manifest (exported before 2026-12-08): its task is not '
                     'checked, only its widths', path)
    else:
        if manifest.task != task:
            raise PolicyFileError(f'{path}: exported for task {manifest.task!r}, not for '
                                  f'the task {task!r} it was to act in')
        for name, want in (('obs_dim', obs_dim), ('act_dim', act_dim)):
            if getattr(manifest, name) != int(want):
                raise PolicyFileError(f'{path}: {name} = {getattr(manifest, name)} does not fit '
                                      f'the environment ({int(want)}); the task settings differ '
                                      'from those it was trained with')
    try:
        module = torch.jit.load(str(path), map_location='cpu')
    except (RuntimeError, ValueError, OSError) as exc:
        raise PolicyFileError(f'{path}: torch cannot load it ({first_line(exc)})') from None
    return module, manifest
