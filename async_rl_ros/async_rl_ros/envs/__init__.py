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
Robot backends and the tasks (never imports rclpy).

Importing this package registers the tasks with Gymnasium (``gymnasium.make(
'async_rl_ros/UR5Reach-v0')``, see :mod:`async_rl_ros.envs.goal_view`) when Gymnasium is
installed; registering twice is a no-op.
"""

import importlib.util as _util

if _util.find_spec('gymnasium') is not None:  # the sim extra: register our Gymnasium ids
    from async_rl_ros.envs.goal_view import register_envs as _register_envs
    _register_envs()
