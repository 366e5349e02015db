"""``chakra.schema.protobuf.et_def_pb2``: the reference toolkit's import path for the protobuf bindings.

An alias, not a second copy: every message class and enum constant here *is* the one of
:mod:`chakra.schema.et_def_pb2` (``Node is chakra.schema.Node``), so messages made through either path mix
freely.  Generated ``*_pb2`` modules also expose each enum as a wrapper with ``Name``/``Value``/``keys``
(``NodeType.Name(4) == "COMP_NODE"``); those two are built here from the same descriptor.
"""

from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from chakra.schema import et_def_pb2 as _bindings

# every message class, enum constant and DESCRIPTOR of the bindings (their public names are capitalised),
# the same objects under this module's name
globals().update({name: getattr(_bindings, name) for name in dir(_bindings) if name[:1].isupper()})

NodeType = EnumTypeWrapper(_bindings.DESCRIPTOR.enum_types_by_name["NodeType"])
CollectiveCommType = EnumTypeWrapper(_bindings.DESCRIPTOR.enum_types_by_name["CollectiveCommType"])
