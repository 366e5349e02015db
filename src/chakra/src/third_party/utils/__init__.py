"""The reference toolkit's ``chakra.src.third_party.utils``: only ``protolib`` (see there)."""
