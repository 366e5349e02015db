"""Part of the reference toolkit's module path ``chakra.src.third_party.utils.protolib`` (an alias)."""
