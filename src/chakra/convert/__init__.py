"""ET+ JSON (or a bare host ET) -> Chakra protobuf execution trace.

Public API:

* :func:`convert_trace` ``(host_trace) -> (GlobalMetadata, [Node, ...])``
* :func:`convert_file` ``(input_path, output_path, *, astrasim_safe=False) -> ConvertReport``
"""

from chakra.convert.core import ET_VERSION, ConvertStats, build, convert_trace  # noqa: F401
from chakra.convert.driver import ConvertReport, convert_file  # noqa: F401

__all__ = ["ET_VERSION", "ConvertReport", "ConvertStats", "build", "convert_file", "convert_trace"]
