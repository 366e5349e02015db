"""The replay's modes, as types: each a ``Literal`` of the values a caller may pass, and the tuple of them
that the run-time checks (callers outside a type checker, a library user's strings) and error messages use.

* :data:`Mode`: ``"lanes"`` (each node on its own thread or stream, the recorded gaps kept) or
  ``"astrasim"`` (what ASTRA-sim's ``--system`` does with the same file).
* :data:`Missing`: a dependency on a node that is not in the file is an ``"error"`` or ignored.
* :data:`CollectiveRule`: how a coupled collective is timed: ``"net"``, ``"min"``, or ``"auto"``
  (:func:`chakra.replay.api.collective_rule` picks one of the two); :data:`CollectiveDuration` is the
  picked one.
* :data:`UnknownGroup`: a collective on a process group no table lists is an ``"error"`` or taken as the
  ``"world"``.
"""

from __future__ import annotations

from typing import Literal, get_args

from chakra.job.match import UnknownGroup

Mode = Literal["lanes", "astrasim"]
Missing = Literal["error", "ignore"]
CollectiveDuration = Literal["min", "net"]
CollectiveRule = Literal["auto", "net", "min"]

MODES: tuple[Mode, ...] = get_args(Mode)
MISSING: tuple[Missing, ...] = get_args(Missing)
COLLECTIVE_DURATIONS: tuple[CollectiveDuration, ...] = get_args(CollectiveDuration)
COLLECTIVE_CHOICES: tuple[CollectiveRule, ...] = get_args(CollectiveRule)
UNKNOWN_GROUP_CHOICES: tuple[UnknownGroup, ...] = get_args(UnknownGroup)

__all__ = ["COLLECTIVE_CHOICES", "COLLECTIVE_DURATIONS", "MISSING", "MODES", "UNKNOWN_GROUP_CHOICES",
           "CollectiveDuration", "CollectiveRule", "Missing", "Mode", "UnknownGroup"]
