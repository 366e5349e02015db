"""Host ET <-> Kineto linking: ET+ JSON with timing, GPU ops, collectives and dependencies.

Passes, each a module: ``window`` (which Kineto iteration the host ET recorded,
the measured window), ``match`` (+ ``align``: host op <-> Kineto event),
``gpu`` (GPU ops -> launching host op), ``comm`` (collective fields, process
groups), ``deps`` (inter-thread and synchronisation dependencies), ``etplus``
(nodes in the file's own layout); ``api`` strings them together.  ``kineto_only`` makes the host ET
of a Kineto trace that has none (``link_kineto``, ``link_files(None, kineto, out)``).
"""

from chakra.link.api import LinkReport, link_files, link_kineto, link_traces

# Every rank of a folder (``link_folder``) and the command (``link_command``) are in chakra.pipeline.link:
# running many ranks is the pipeline's layer, above this one.
__all__ = ["LinkReport", "link_files", "link_kineto", "link_traces"]
