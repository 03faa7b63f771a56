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
Wire format of the RTDE protocol (version 2), as Universal Robots documents it.

A package is ``uint16 size`` (header included) ``uint8 type`` then the payload, big-endian.
Variables have fixed types; a data package is ``uint8 recipe_id`` followed by the values of
the recipe's variables in order.
"""

from __future__ import annotations

import re
import struct

__all__ = ['PKG', 'var_type', 'recipe_struct', 'pack', 'TYPE_FORMAT', 'default_value']

#: Package types (ASCII letters on the wire).
PKG = {
    'REQUEST_PROTOCOL_VERSION': ord('V'),
    'GET_URCONTROL_VERSION': ord('v'),
    'TEXT_MESSAGE': ord('M'),
    'DATA_PACKAGE': ord('U'),
    'SETUP_OUTPUTS': ord('O'),
    'SETUP_INPUTS': ord('I'),
    'START': ord('S'),
    'PAUSE': ord('P'),
}

#: struct format of each RTDE type.
TYPE_FORMAT = {
    'BOOL': '?', 'UINT8': 'B', 'UINT32': 'I', 'UINT64': 'Q', 'INT32': 'i', 'DOUBLE': 'd',
    'VECTOR3D': '3d', 'VECTOR6D': '6d', 'VECTOR6INT32': '6i', 'VECTOR6UINT32': '6I',
}

_EXACT = {
    'timestamp': 'DOUBLE', 'actual_execution_time': 'DOUBLE', 'speed_scaling': 'DOUBLE',
    'target_speed_fraction': 'DOUBLE', 'actual_momentum': 'DOUBLE',
    'actual_main_voltage': 'DOUBLE', 'actual_robot_voltage': 'DOUBLE',
    'actual_robot_current': 'DOUBLE', 'payload': 'DOUBLE', 'tcp_force_scalar': 'DOUBLE',
    'speed_slider_fraction': 'DOUBLE', 'tool_output_current': 'DOUBLE',
    'tool_temperature': 'DOUBLE', 'io_current': 'DOUBLE', 'tool_analog_input0': 'DOUBLE',
    'tool_analog_input1': 'DOUBLE', 'standard_analog_input0': 'DOUBLE',
    'standard_analog_input1': 'DOUBLE', 'standard_analog_output0': 'DOUBLE',
    'standard_analog_output1': 'DOUBLE', 'standard_analog_output_0': 'DOUBLE',
    'standard_analog_output_1': 'DOUBLE',
    'actual_digital_input_bits': 'UINT64', 'actual_digital_output_bits': 'UINT64',
    'robot_mode': 'INT32', 'safety_mode': 'INT32', 'safety_status': 'INT32',
    'tool_output_voltage': 'INT32',
    'joint_mode': 'VECTOR6INT32',
    'runtime_state': 'UINT32', 'robot_status_bits': 'UINT32', 'safety_status_bits': 'UINT32',
    'output_bit_registers0_to_31': 'UINT32', 'output_bit_registers32_to_63': 'UINT32',
    'input_bit_registers0_to_31': 'UINT32', 'input_bit_registers32_to_63': 'UINT32',
    'speed_slider_mask': 'UINT32', 'tool_mode': 'UINT32', 'analog_io_types': 'UINT32',
    'tool_analog_input_types': 'UINT32', 'script_control_line': 'UINT32',
    'actual_tool_accelerometer': 'VECTOR3D', 'payload_cog': 'VECTOR3D',
    'elbow_position': 'VECTOR3D', 'elbow_velocity': 'VECTOR3D',
    'standard_digital_output_mask': 'UINT8', 'standard_digital_output': 'UINT8',
    'configurable_digital_output_mask': 'UINT8', 'configurable_digital_output': 'UINT8',
    'tool_digital_output_mask': 'UINT8', 'tool_digital_output': 'UINT8',
    'standard_analog_output_mask': 'UINT8', 'standard_analog_output_type': 'UINT8',
    'tool_output_mode': 'UINT8', 'tool_digital_output0_mode': 'UINT8',
    'tool_digital_output1_mode': 'UINT8',
}


def var_type(name: str) -> str:
    """Return the RTDE type of a variable name (VECTOR6D for the joint and pose vectors)."""
    if name in _EXACT:
        return _EXACT[name]
    if re.fullmatch(r'(input|output)_int_register_\d+', name):
        return 'INT32'
    if re.fullmatch(r'(input|output)_double_register_\d+', name):
        return 'DOUBLE'
    if re.fullmatch(r'(input|output)_bit_register_\d+', name):
        return 'BOOL'
    if name.startswith('euromap67'):
        return 'UINT32'
    return 'VECTOR6D'


def default_value(name: str) -> object:
    """Return a zero of the variable's type (a list for the vector types)."""
    fmt = TYPE_FORMAT[var_type(name)]
    if fmt[0].isdigit():
        return [0.0 if fmt[-1] == 'd' else 0] * int(fmt[0])
    return {'d': 0.0, '?': False}.get(fmt, 0)


def recipe_struct(names: list[str]) -> struct.Struct:
    """Return the big-endian struct of a data package body (recipe id first)."""
    return struct.Struct('>B' + ''.join(TYPE_FORMAT[var_type(n)] for n in names))


def pack(kind: int, payload: bytes = b'') -> bytes:
    """Frame one package."""
    return struct.pack('>HB', len(payload) + 3, kind) + payload
