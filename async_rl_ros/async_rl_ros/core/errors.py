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
Expected failures that cross from an environment into the core's worker loop.

They are defined here, not where they are raised, so that the core reacts to them without
importing a robot backend: :class:`~async_rl_ros.core.workers.runtime.WorkerRuntime` never
retries a step that raised :class:`NeedsPerson`, and the trainers report it as an outcome.
"""

__all__ = ['NeedsPerson']


class NeedsPerson(RuntimeError):
    """The arm is halted and only a person may decide what happens next."""
