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

"""Build script of the ament_python package ``async_rl_ros`` (also pip-installable)."""

from glob import glob

from setuptools import find_packages, setup

package_name = 'async_rl_ros'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test', 'test.*']),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        ('share/' + package_name + '/launch', glob('launch/*.launch.py')),
        ('share/' + package_name + '/config',
         glob('config/*.yaml') + glob('config/*.perspective') + glob('config/*.xml')),
        ('share/' + package_name + '/config/sros2', glob('config/sros2/*.xml')),
    ],
    python_requires='>=3.10',
    install_requires=[
        'setuptools',
        'numpy>=1.22',
        'pyyaml>=5.4',
        'transforms3d>=0.4',
    ],
    extras_require={
        'sim': ['pybullet>=3.2.5', 'gymnasium>=0.29'],
        'learn': ['torch>=2.6', 'tensorboard>=2.12', 'tqdm>=4.60', 'matplotlib>=3.5',
                  'psutil>=5.9'],
        'real': ['ur-rtde==1.6.5'],
        'gym': ['panda-gym==3.0.7', 'scipy>=1.10'],
        'bench': ['stable-baselines3>=2.7,<3', 'sb3-contrib>=2.7,<3', 'panda-gym==3.0.7',
                  'scipy>=1.10'],
        'test': ['pytest>=7', 'pytest-timeout>=2', 'hypothesis>=6.80',
                 'ament-lint-flake8', 'ament-lint-pep257', 'ament-xmllint', 'ament-lint'],
    },
    zip_safe=True,
    maintainer='async_rl_ros maintainers',
    maintainer_email='maintainers@async-rl-ros.invalid',
    description='Asynchronous off-policy RL for UR5 arms, ROS 2 nodes and a no-ROS runner.',
    license='Apache-2.0',
    tests_require=['pytest'],
    entry_points={
        'console_scripts': [
            'async-rl-train = async_rl_ros.local.cli:main',
            'async-rl-preflight = async_rl_ros.envs.preflight:main',
            'env_worker = async_rl_ros.ros.env_worker_node:main',
            'learner = async_rl_ros.ros.learner_node:main',
            'param_server = async_rl_ros.ros.param_server_node:main',
            'policy_runner = async_rl_ros.ros.policy_runner_node:main',
        ],
    },
)
