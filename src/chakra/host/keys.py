"""The keys of a host ET node and of an ET+ node (the JSON this toolkit reads and the linker writes) that
more than one module reads or writes by name (docs/formats.md, "Host execution trace" and "ET+").

Only here: the attributes of a Chakra .et node are ``chakra.formats.ATTR_*`` (several are spelt the same,
e.g. ``pg_name``, but they are another format's names), a process-group record's fields
``chakra.formats.GROUP_*``.  A flat host ET (schema 1.0.1+) writes the standard fields as a node's own keys,
a chakra-schema one (1.0.2-chakra.0.0.4 on) as items of its ``attrs`` list, ``{name, type, value}``: the
names are the same.
"""

from __future__ import annotations

# -- an op's standard fields (chakra.host.model.HostOp has one slot each) --------------------------------
#: the record_function id (Kineto's ``Record function id`` on the same op, in newer PyTorch)
RF_ID = "rf_id"
#: the forward op a backward op was recorded for (its node id), and that op's thread
FW_PARENT, FW_TID = "fw_parent", "fw_tid"
#: the autograd sequence number (-1: none) and the RecordScope
SEQ_ID, SCOPE = "seq_id", "scope"
#: the CPU thread the op ran on (an ET+ GPU node: its stream, as Kineto's ``tid``)
TID = "tid"
#: the op's schema string (e.g. ``aten::mm(Tensor self, Tensor mat2) -> Tensor``)
OP_SCHEMA = "op_schema"
#: all of them, in HostOp's order
STD_FIELDS = (RF_ID, TID, FW_PARENT, SEQ_ID, SCOPE, FW_TID, OP_SCHEMA)

# -- communication: a record_param_comms op's attributes (PyTorch 2.x), and an ET+ GPU node's keys ------
#: the collective as PyTorch names it (``allreduce``, ``_allgather_base``, ``send``, ...)
COLLECTIVE_NAME = "collective_name"
#: the process group's name (the key of the process-group records) and PyTorch's description of it
PG_NAME, PG_DESC = "pg_name", "pg_desc"
#: the process group's size (record_param_comms)
PG_SIZE = "pg_size"
#: an ET+ GPU node's bytes (the linker's: chakra.link.comm)
COMM_SIZE = "comm_size"

# -- an ET+ document's top-level keys that the linker adds and the host loader reads -----------------------
#: the rank the collectives were recorded with, the job's world size, the process-group records
#: (their fields: chakra.formats.GROUP_*)
RANK, WORLD_SIZE, PROCESS_GROUPS = "rank", "world_size", "process_groups"
