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
Typed configuration: the single source of truth for every tunable of the project.

One section (a dataclass built with :func:`~async_rl_ros.core.options.option`) per component,
declared in :mod:`async_rl_ros.core.sections` along the data path (``env``, ``learning``,
``transport``) and re-exported here, where users import configuration from;
``NODE_SECTIONS`` maps each node name of the parameter files in ``config/`` to its section,
and :func:`load_node_config` here refuses a file section that names no node of it.
``python -m async_rl_ros.core.config`` prints ``docs/parameters.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from async_rl_ros.core import param_file
from async_rl_ros.core.options import ConfigError, option, OptionInfo, Section
from async_rl_ros.core.param_file import load_yaml_parameters, parameters_markdown
from async_rl_ros.core.sections.doctor import DoctorConfig
from async_rl_ros.core.sections.env import (CellConfig, EnvWorkerConfig, ManipulationConfig,
                                            RTDEConfig, SafetyConfig, SimConfig, TaskConfig)
from async_rl_ros.core.sections.learning import (BatchSizerConfig, CheckpointConfig,
                                                 HindsightConfig, LearnerConfig, ReplayConfig,
                                                 SACConfig)
from async_rl_ros.core.sections.transport import (CodecConfig, LocalRunnerConfig,
                                                  ParameterServerConfig, RosTransportConfig)

__all__ = [
    # the framework, re-exported: ``core.config`` is where users import configuration from
    'ConfigError',
    'OptionInfo',
    'option',
    'Section',
    'load_yaml_parameters',
    'load_node_config',
    'parameters_markdown',
    # the sections
    'TaskConfig',
    'ManipulationConfig',
    'CellConfig',
    'SafetyConfig',
    'SimConfig',
    'RTDEConfig',
    'EnvWorkerConfig',
    'SACConfig',
    'ReplayConfig',
    'HindsightConfig',
    'DoctorConfig',
    'BatchSizerConfig',
    'CheckpointConfig',
    'LearnerConfig',
    'CodecConfig',
    'ParameterServerConfig',
    'LocalRunnerConfig',
    'RosTransportConfig',
    'NODE_SECTIONS',
    'LEARNER_ENV_SECTIONS',
]

NODE_SECTIONS: dict[str, type[Section]] = {
    'env_worker': EnvWorkerConfig,
    'learner': LearnerConfig,
    'local_runner': LocalRunnerConfig,
    'ros_transport': RosTransportConfig,
}

#: The ``env_worker`` sections a learner node reads too, under their own names: its task's
#: spec and rewards (hindsight relabeling) and its evaluator's simulated arm follow the workers'.
LEARNER_ENV_SECTIONS: dict[str, type[Section]] = {
    'task': TaskConfig,
    'manipulation': ManipulationConfig,
    'safety': SafetyConfig,
    'sim': SimConfig,
}


def load_node_config(path: str | Path | None, node: str, cls: type[Section],
                     overrides: Mapping[str, Any] | None = None,
                     defaults: Mapping[str, Any] | None = None) -> Section:
    """
    Load the section of ``node`` from a parameter file whose sections all name known nodes.

    :func:`async_rl_ros.core.param_file.load_node_config` with ``known_nodes`` set to
    :data:`NODE_SECTIONS`: a misspelled section (``lerner:``) is refused with a suggestion.
    ``defaults`` go under the file (a task's own settings:
    :func:`async_rl_ros.envs.tasks.task_defaults`).
    """
    return param_file.load_node_config(path, node, cls, overrides, known_nodes=NODE_SECTIONS,
                                       defaults=defaults)


if __name__ == '__main__':
    print(parameters_markdown(NODE_SECTIONS), end='')
