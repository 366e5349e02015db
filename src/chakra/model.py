"""The shared model, in one import: host ET, Kineto trace, process groups."""

from chakra.device.model import KinetoEvent, KinetoTrace, StepWindow  # noqa: F401
from chakra.host.model import CommInfo, HostOp, HostTrace, IOInfo, ProcessGroup  # noqa: F401
