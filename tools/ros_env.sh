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
# The Python dependencies of async_rl_ros next to a sourced ROS 2, without touching the system
# Python (Debian 12 and Ubuntu 24.04 refuse `pip install` there: PEP 668).
#
#   source /opt/ros/jazzy/setup.bash       # or your source build's install/setup.bash
#   tools/ros_env.sh [--cuda] [--real] [VENV]   (VENV default: ~/.venvs/async_rl_ros)
#   source VENV/bin/activate && python -m colcon build --symlink-install --cmake-args \
#     "-DPython3_EXECUTABLE=$(command -v python3)" "-DPYTHON_EXECUTABLE=$(command -v python3)"
#
# It makes a virtual environment that sees the ROS packages (--system-site-packages), installs
# the pinned torch -- the CPU wheel from PyTorch's CPU index unless --cuda asks for PyPI's
# CUDA build (gigabytes) -- and the extras sim and learn (real with --real: ur-rtde for a
# physical UR5) at the versions of requirements.txt, and marks the folder COLCON_IGNORE.
# colcon run as `python -m colcon` from the activated environment builds the nodes with its
# interpreter, so `ros2 launch` runs them where their dependencies are; and since ROS 2's own
# commands (`ros2 launch` loads train.launch.py, which imports the package) run on the system
# python3, activating the environment also puts its packages on PYTHONPATH. It prints what it
# did.
# TORCH_INDEX_URL replaces the CPU index (a mirror).
set -euo pipefail

cuda=0
real=0
venv="${HOME}/.venvs/async_rl_ros"
for arg in "$@"; do
  case "$arg" in
    --cuda) cuda=1 ;;
    --real) real=1 ;;
    -h|--help) sed -n '16,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "ros_env.sh: unknown option $arg (allowed: --cuda, --real, a folder)" >&2; exit 2 ;;
    *) venv="$arg" ;;
  esac
done

if [ -z "${ROS_DISTRO:-}" ] || ! python3 -c 'import rclpy' 2>/dev/null; then
  echo 'ros_env.sh: source the setup file of ROS 2 first (ROS_DISTRO unset or rclpy not' \
    'importable by python3): the environment must see its Python packages' >&2
  exit 2
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
pins="$repo/requirements.txt"
pin() {  # the pinned requirement of a package, from requirements.txt
  grep -iE "^$1==" "$pins" || { echo "ros_env.sh: $1 is not pinned in $pins" >&2; exit 1; }
}
torch_pin=$(pin torch)
packages=()
for name in numpy pyyaml transforms3d pybullet gymnasium tensorboard tqdm matplotlib psutil; do
  packages+=("$(pin "$name")")
done
if [ "$real" = 1 ]; then
  packages+=("$(pin ur-rtde)")
fi

start=$(date +%s)
python3 -m venv --system-site-packages "$venv"
touch "$venv/COLCON_IGNORE"  # colcon does not look for packages in it
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if ! grep -q 'async_rl_ros: ROS 2' "$venv/bin/activate"; then
  cat >> "$venv/bin/activate" <<EOF
# async_rl_ros: ROS 2's own commands (ros2 launch loads the launch file, which imports the
# package) run on the system python3: they find this environment's packages here.
export PYTHONPATH="$site\${PYTHONPATH:+:\$PYTHONPATH}"
EOF
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
if [ "$cuda" = 1 ]; then
  "$venv/bin/python" -m pip install --quiet "$torch_pin"
  torch_from='PyPI (CUDA build)'
else
  index=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
  "$venv/bin/python" -m pip install --quiet "$torch_pin" --index-url "$index"
  torch_from="$index"
fi
"$venv/bin/python" -m pip install --quiet "${packages[@]}"
"$venv/bin/python" - <<'EOF'
import importlib
for name in ('rclpy', 'torch', 'pybullet', 'gymnasium', 'tensorboard', 'yaml', 'numpy'):
    importlib.import_module(name)  # the ROS packages and the new ones, side by side
EOF

size=$(du -sh "$venv" | cut -f1)
echo "ros_env.sh: $venv ($size, $(( $(date +%s) - start )) s) for ROS 2 $ROS_DISTRO:"
echo "  $torch_pin from $torch_from; ${packages[*]}"
echo "  next: source $venv/bin/activate && cd <your workspace> &&" \
  'python -m colcon build --symlink-install --cmake-args' \
  '"-DPython3_EXECUTABLE=$(command -v python3)" "-DPYTHON_EXECUTABLE=$(command -v python3)"' \
  '&& source install/setup.bash'
