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
Render modes that work on this machine: ``human`` needs a display, ``rgb_array`` never does.

A PyBullet GUI asked for without a display does not fail, it hangs (in native code, deaf to
Ctrl-C and SIGTERM). Every env of this package (the UR5 envs and their simulator, the Gymnasium
envs it flattens, the goal-conditioned view) asks here before it advertises or opens one. A
watched simulated UR5 (``human`` mode) steps at its control rate: :func:`paced_for_watching`.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from async_rl_ros.core.config import EnvWorkerConfig
from async_rl_ros.core.options import ConfigError

__all__ = ['has_display', 'render_modes', 'check_render_mode', 'check_gui',
           'paced_for_watching']


def has_display() -> bool:
    """Tell whether a window can open (on Linux: ``$DISPLAY`` is set; elsewhere: yes)."""
    return not sys.platform.startswith('linux') or bool(os.environ.get('DISPLAY'))


def render_modes(modes: Sequence[str]) -> list[str]:
    """
    Return the render modes of ``modes`` that work here: ``human`` needs a display.

    ``human`` is neither advertised (Gymnasium's ``check_env`` tries every mode the metadata
    lists) nor accepted (:func:`check_render_mode`) where no window can open.
    """
    return [m for m in modes if m != 'human' or has_display()]


def check_render_mode(render_mode: str | None) -> None:
    """
    Refuse ``render_mode='human'`` where no window can open (instead of hanging).

    :raises ConfigError: naming ``render_mode``.
    """
    if render_mode == 'human' and not has_display():
        raise ConfigError('render_mode', render_mode, "rgb_array or None: 'human' opens a "
                          'window and $DISPLAY is not set')


def check_gui(gui: bool) -> None:
    """
    Refuse ``sim.gui`` where no window can open (instead of hanging).

    :raises ConfigError: naming ``sim.gui``.
    """
    if gui and not has_display():
        raise ConfigError('sim.gui', gui, 'false here: a simulator window needs a display and '
                          '$DISPLAY is not set; training needs no window')


def paced_for_watching(cfg: EnvWorkerConfig, render_mode: str | None) -> EnvWorkerConfig:
    """
    Return ``cfg`` as a watched env runs it: a simulated arm in ``human`` mode is paced.

    It steps at its control rate on the wall clock (``sim.real_time``): Gymnasium's ``human``
    mode shows an episode at ``metadata['render_fps']``, which the UR5 envs give as their
    control rate; unpaced, the simulator runs an episode of seconds of arm time in a few
    milliseconds, too fast to see.
    """
    if render_mode == 'human' and cfg.backend == 'sim' and not cfg.sim.real_time:
        return cfg.replace(**{'sim.real_time': True})
    return cfg
