"""Kineto (PyTorch profiler) traces: the typed model and its loader."""

from chakra.device.loader import load_kineto, measured_window  # noqa: F401
