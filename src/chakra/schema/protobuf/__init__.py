"""The reference toolkit's module path ``chakra.schema.protobuf`` (its generated ``et_def_pb2`` lives here).

Scripts written for MLCommons Chakra import ``chakra.schema.protobuf.et_def_pb2``; this package makes that
path name our bindings (:mod:`chakra.schema`), so those scripts run unchanged.
"""
