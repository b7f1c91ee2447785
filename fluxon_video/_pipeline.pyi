"""_pipeline is cimported by the other native units; it has no Python API."""
