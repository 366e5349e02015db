"""Host ET <-> Kineto linking: ET+ JSON with timing, GPU ops, collectives and dependencies.

Passes, each a module: ``window`` (which Kineto iteration the host ET recorded,
the measured window), ``match`` (+ ``align``: host op <-> Kineto event),
``gpu`` (GPU ops -> launching host op), ``comm`` (collective fields, process
groups), ``deps`` (inter-thread and synchronisation dependencies), ``etplus``
(nodes in the file's own layout); ``api`` strings them together.  ``kineto_only`` makes the host ET
of a Kineto trace that has none (``link_kineto``, ``link_files(None, kineto, out)``).
"""

from chakra.link.api import (
    LinkReport,
    find_rank_pairs,
    link_command,
    link_files,
    link_folder,
    link_kineto,
    link_kineto_file,
    link_traces,
)

__all__ = ["LinkReport", "find_rank_pairs", "link_command", "link_files", "link_folder", "link_kineto",
           "link_kineto_file", "link_traces"]
