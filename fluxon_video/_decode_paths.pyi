"""_decode_paths is cimported by the other native units; it has no Python API."""
