#!/usr/bin/env bash
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
#
# The SROS2 keystore of async_rl_ros: one enclave per role, each with the permissions of
# async_rl_ros/config/sros2/async_rl_ros.policy.xml (docs/ros.md, "Security").
#
#   source /opt/ros/jazzy/setup.bash        # a ROS 2 with sros2
#   tools/sros2_keystore.sh [KEYSTORE]      (default: ~/.ros/async_rl_ros_keystore)
#   ros2 launch async_rl_ros train.launch.py security:=true keystore:=KEYSTORE
#
# Enclaves: /async_rl_ros/learner, shard, worker, policy_runner, camera (a cube-pose camera)
# and monitor (the launch process, which drives the workers' lifecycle, and rqt). The
# permissions are signed for the ROS_DOMAIN_ID of this shell (0 when unset): run it again
# with another one to use another domain. Run again on an existing keystore, it keeps the
# certificate authorities and regenerates the enclaves' keys and permissions. Copy the
# keystore (or only the enclaves a host runs, with the public folder) to the other hosts;
# keep private/ (the CA keys) off the robot and worker hosts.
set -euo pipefail

if ! command -v ros2 >/dev/null 2>&1 || ! ros2 security --help >/dev/null 2>&1; then
  echo 'sros2_keystore: no ROS 2 with sros2 here: source its setup file first' \
    '(ros2 security not found)' >&2
  exit 2
fi

keystore=${1:-$HOME/.ros/async_rl_ros_keystore}
policy="$(cd "$(dirname "$0")/.." && pwd)/async_rl_ros/config/sros2/async_rl_ros.policy.xml"
if [ ! -f "$policy" ]; then  # the script without its checkout: the installed package's policy
  policy="$(ros2 pkg prefix async_rl_ros)/share/async_rl_ros/config/sros2/async_rl_ros.policy.xml"
fi
export PYTHONWARNINGS=ignore  # sros2's deprecation warnings from cryptography
roles=(learner shard worker policy_runner camera monitor)

if [ ! -f "$keystore/enclaves/governance.p7s" ]; then
  ros2 security create_keystore "$keystore" >/dev/null
  echo "sros2_keystore: created the keystore $keystore (domain ${ROS_DOMAIN_ID:-0})"
else
  echo "sros2_keystore: using the keystore $keystore"
fi
for role in "${roles[@]}"; do
  enclave=/async_rl_ros/$role
  ros2 security create_enclave "$keystore" "$enclave" >/dev/null
  ros2 security create_permission "$keystore" "$enclave" "$policy" >/dev/null
  echo "sros2_keystore: enclave $enclave with the permissions of its role"
done
echo "sros2_keystore: permissions from $policy for ROS_DOMAIN_ID ${ROS_DOMAIN_ID:-0}; run:"
echo "  ros2 launch async_rl_ros train.launch.py security:=true keystore:=$keystore"
