"""Device descriptions: what the hardware a latency predictor describes is, read from
the machine (``/proc/cpuinfo``, sysfs) into plain records with stable names."""

from __future__ import annotations

from nnmeter.devices.cpu import DISPATCH_FLAGS, CpuInfo, local_cpu, read_cpu

__all__ = ["CpuInfo", "read_cpu", "local_cpu", "DISPATCH_FLAGS"]
