"""Bytes in, bytes out: JSON(.gz), length-delimited protobuf streams, atomic writes."""

from chakra.io.atomic import atomic_output  # noqa: F401
from chakra.io.gcpause import gc_paused  # noqa: F401
from chakra.io.jsonio import dump_json, load_json, read_bytes  # noqa: F401
from chakra.io.pbstream import (  # noqa: F401
    decode_varint,
    encode_varint,
    iter_messages,
    read_messages,
    write_messages,
)
