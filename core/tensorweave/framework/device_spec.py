"""Device names and partial device specifications.

A full device name is ``/job:worker/replica:0/task:3/device:OPENCL:0``. A specification may
leave any field unset (``/device:GPU:*``, ``/job:ps``, ``/cpu:0``); ``DeviceSpec.matches``
says whether a concrete device satisfies it and ``merge`` combines nested ``tw.device`` scopes.
"""

from __future__ import annotations

import re

from tensorweave.framework import errors

_FIELD = re.compile(r"^(job|replica|task|device):(.*)$")
_LEGACY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):(\*|\d+)$")


class DeviceSpec:
    __slots__ = ("job", "replica", "task", "device_type", "device_index")

    def __init__(self, job=None, replica=None, task=None, device_type=None, device_index=None):
        self.job = job
        self.replica = None if replica is None else int(replica)
        self.task = None if task is None else int(task)
        self.device_type = None if device_type is None else str(device_type).upper()
        self.device_index = None if device_index in (None, "*") else int(device_index)

    @classmethod
    def from_string(cls, spec: str | DeviceSpec | None) -> DeviceSpec:
        if isinstance(spec, DeviceSpec):
            return spec
        out = cls()
        if not spec:
            return out
        for part in str(spec).strip().split("/"):
            if not part:
                continue
            m = _FIELD.match(part)
            try:
                if m and m.group(1) == "device":
                    sub = m.group(2)
                    if ":" in sub:
                        out.device_type, idx = sub.split(":", 1)
                        out.device_type = out.device_type.upper()
                        out.device_index = None if idx == "*" else int(idx)
                    else:
                        out.device_type = sub.upper()
                elif m:
                    key, val = m.groups()
                    if key == "job":
                        out.job = val
                    else:
                        setattr(out, key, None if val == "*" else int(val))
                elif _LEGACY.match(part):  # "/cpu:0", "/gpu:1" as in early TensorFlow
                    dtype, idx = part.split(":")
                    out.device_type = dtype.upper()
                    out.device_index = None if idx == "*" else int(idx)
                else:
                    raise ValueError(part)
            except ValueError:
                raise errors.InvalidArgumentError(
                    f"malformed device specification {spec!r} (at {part!r}); expected e.g. "
                    "'/job:worker/replica:0/task:1/device:CPU:0' or '/device:GPU:*'"
                ) from None
        return out

    def merge_from(self, other: DeviceSpec | str) -> DeviceSpec:
        """A new spec with ``other``'s set fields overriding ours (inner scope wins)."""
        other = DeviceSpec.from_string(other)
        return DeviceSpec(
            other.job if other.job is not None else self.job,
            other.replica if other.replica is not None else self.replica,
            other.task if other.task is not None else self.task,
            other.device_type if other.device_type is not None else self.device_type,
            other.device_index if other.device_type is not None or other.device_index is not None
            else self.device_index,
        )

    def matches(self, device_name: str | DeviceSpec) -> bool:
        """True when the concrete device ``device_name`` satisfies every field set here."""
        d = DeviceSpec.from_string(device_name)
        return all(
            mine is None or mine == theirs
            for mine, theirs in (
                (self.job, d.job), (self.replica, d.replica), (self.task, d.task),
                (self.device_type, d.device_type), (self.device_index, d.device_index),
            )
        )

    def to_string(self) -> str:
        s = ""
        if self.job is not None:
            s += f"/job:{self.job}"
        if self.replica is not None:
            s += f"/replica:{self.replica}"
        if self.task is not None:
            s += f"/task:{self.task}"
        if self.device_type is not None:
            s += f"/device:{self.device_type}:{'*' if self.device_index is None else self.device_index}"
        return s

    __str__ = to_string

    def __repr__(self):
        return f"DeviceSpec({self.to_string()!r})"

    def __eq__(self, other):
        return isinstance(other, DeviceSpec) and self.to_string() == other.to_string()

    def __hash__(self):
        return hash(self.to_string())

