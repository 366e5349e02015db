"""A script written against the reference toolkit's documented imports and API only (MLCommons Chakra:
``chakra.schema.protobuf.et_def_pb2`` and ``chakra.src.third_party.utils.protolib``), the way ASTRA-sim's
workload generators and the reference's jsonizer use them.  It must run unchanged here: as a test
(pytest) and as a plain script (``python tests/schema/test_reference_api.py OUT_DIR``).
"""

import gzip
import os
import sys
import tempfile

from chakra.schema.protobuf.et_def_pb2 import (
    ALL_REDUCE,
    COMM_COLL_NODE,
    COMP_NODE,
    GlobalMetadata,
    NodeType,
)
from chakra.schema.protobuf.et_def_pb2 import AttributeProto as ChakraAttr
from chakra.schema.protobuf.et_def_pb2 import Node as ChakraNode
from chakra.src.third_party.utils.protolib import decodeMessage as decode_message
from chakra.src.third_party.utils.protolib import encodeMessage as encode_message
from chakra.src.third_party.utils.protolib import openFileRd as open_file_rd


def write_tiny_et(path, npu_id):
    """One compute node, then an all-reduce that depends on it (what the reference's generator writes)."""
    with open(path, "wb") as et:
        encode_message(et, GlobalMetadata(version="0.0.4", attr=[ChakraAttr(name="npu", int64_val=npu_id)]))
        comp = ChakraNode()
        comp.id = 1
        comp.name = "COMP_NODE"
        comp.type = COMP_NODE
        comp.duration_micros = 5
        comp.attr.append(ChakraAttr(name="is_cpu_op", bool_val=False))
        encode_message(et, comp)
        comm = ChakraNode()
        comm.id = 2
        comm.name = "ALL_REDUCE"
        comm.type = COMM_COLL_NODE
        comm.data_deps.append(comp.id)
        comm.attr.append(ChakraAttr(name="is_cpu_op", bool_val=False))
        comm.attr.append(ChakraAttr(name="comm_type", int64_val=ALL_REDUCE))
        comm.attr.append(ChakraAttr(name="comm_size", int64_val=65536))
        encode_message(et, comm)


def read_et(path):
    """GlobalMetadata and the nodes, read back with the reference's decode loop."""
    et = open_file_rd(path)
    gm = GlobalMetadata()
    node = ChakraNode()
    decode_message(et, gm)
    nodes = []
    while decode_message(et, node):
        nodes.append((node.id, node.name, NodeType.Name(node.type), node.duration_micros,
                      list(node.data_deps), {a.name: a.WhichOneof("value") for a in node.attr}))
    et.close()
    return gm, nodes


def check(out_dir):
    expected = [
        (1, "COMP_NODE", "COMP_NODE", 5, [], {"is_cpu_op": "bool_val"}),
        (2, "ALL_REDUCE", "COMM_COLL_NODE", 0, [1],
         {"is_cpu_op": "bool_val", "comm_type": "int64_val", "comm_size": "int64_val"}),
    ]
    for npu_id in range(2):
        path = os.path.join(out_dir, f"tiny.{npu_id}.et")
        write_tiny_et(path, npu_id)
        gm, nodes = read_et(path)
        assert gm.version == "0.0.4" and gm.attr[0].int64_val == npu_id, gm
        assert nodes == expected, nodes
        with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:   # gzipped ETs read the same
            g.write(f.read())
        assert read_et(path + ".gz")[1] == expected
    assert NodeType.Value("COMM_COLL_NODE") == COMM_COLL_NODE == 7 and ALL_REDUCE == 0


def test_reference_api(tmp_path):
    check(str(tmp_path))


if __name__ == "__main__":
    check(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
    print("ok")
