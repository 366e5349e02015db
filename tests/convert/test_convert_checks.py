"""Invariants every converted Chakra ET must satisfy, checked through tests/wire_reader.py only
(imported by the other converter tests; its own test checks the cycle detector)."""

from __future__ import annotations

from helpers.et_checks import topo_ok
from helpers.wire_reader import WireNode


def test_topo_ok_detects_a_cycle_and_accepts_a_dag():
    a, b, c = WireNode(id=1), WireNode(id=2, data_deps=[1]), WireNode(id=3, ctrl_deps=[2], data_deps=[1])
    assert topo_ok([a, b, c])
    a.data_deps.append(3)
    assert not topo_ok([a, b, c])
