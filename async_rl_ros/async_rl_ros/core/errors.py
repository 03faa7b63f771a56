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
Expected failures that reach the core from an environment; the words for errors in one line.

They are defined here, not where they are raised, so that the core reacts to them without
importing a robot backend: :class:`~async_rl_ros.core.workers.runtime.WorkerRuntime` never
retries a step that raised :class:`NeedsPerson`, and the trainers report it as an outcome.
:func:`first_line` shortens an error (torch's run on for lines) to what fits in one line.
:func:`describe_missing` turns a ``ModuleNotFoundError`` into the one line the CLI and the
ROS nodes print: the package, the extra of ``setup.py`` that brings it, and how to install it.
"""

__all__ = ['NeedsPerson', 'describe_missing', 'first_line', 'EXTRAS']

#: import name -> (pip name, extra of setup.py that installs it)
EXTRAS = {
    'torch': ('torch==2.13.0', 'learn'),
    'tensorboard': ('tensorboard', 'learn'),
    'tqdm': ('tqdm', 'learn'),
    'matplotlib': ('matplotlib', 'learn'),
    'psutil': ('psutil', 'learn'),
    'pybullet': ('pybullet', 'sim'),
    'gymnasium': ('gymnasium', 'sim'),
    'rtde_control': ('ur-rtde==1.6.5', 'real'),
    'rtde_receive': ('ur-rtde==1.6.5', 'real'),
    'rtde_io': ('ur-rtde==1.6.5', 'real'),
    'panda_gym': ('panda-gym==3.0.7', 'gym'),
    'gymnasium_robotics': ('gymnasium-robotics', 'gym'),
}


def describe_missing(exc: ModuleNotFoundError) -> str | None:
    """
    Say which Python package is missing and the command that installs it, in one line.

    :param exc: what an import raised.
    :returns: the line, or ``None`` when a module of async_rl_ros itself is missing (a broken
        install or a bug: the caller re-raises, a user cannot install it).
    """
    top = (exc.name or str(exc)).split('.')[0]
    if top == 'async_rl_ros':
        return None
    if top in ('rclpy', 'launch', 'launch_ros', 'rosbag2_py', 'async_rl_ros_interfaces'):
        return (f'the ROS 2 Python module {top!r} is missing: source the setup file of ROS 2 '
                'and of the workspace that built async_rl_ros first')
    pip_name, extra = EXTRAS.get(top, (top, None))
    if extra is None:
        return f'the Python module {top!r} is missing: pip install {pip_name}'
    return (f'the Python package {pip_name.split("==")[0]!r} is missing (extra {extra!r} of '
            f"async_rl_ros): pip install '{pip_name}' in the Python the program runs with "
            '(ROS 2: the environment tools/ros_env.sh makes)')


class NeedsPerson(RuntimeError):
    """The arm is halted and only a person may decide what happens next."""


def first_line(exc: BaseException) -> str:
    """Return the first sentence of an error message (torch's run on for lines), for one line."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0]
    if first.endswith(':') and len(lines) > 1:  # 'Error(s) in loading state_dict for X:'
        first = f'{first} {lines[1]}'
    return first.split('. ')[0].rstrip('.')[:200]
