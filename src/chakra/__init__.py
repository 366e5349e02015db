"""Chakra trace toolkit: link PyTorch host and Kineto traces, convert them to
Chakra protobuf execution traces, replay them and look at what they hold."""

__version__ = "0.1.0"
