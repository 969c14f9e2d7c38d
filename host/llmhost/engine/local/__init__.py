"""The llama.cpp backend: a decoder behind a protocol, slots that never wait, pure planning, one scheduler loop."""
