"""decord's device contexts: ``cpu(n)`` is the only one made here."""

from __future__ import annotations

__all__ = ["DECORDContext", "cpu", "gpu"]


class DECORDContext:
    """A device context: only the CPU's is made here."""

    def __init__(self, device_type: int, device_id: int) -> None:
        self.device_type, self.device_id = device_type, device_id

    def __repr__(self) -> str:
        return f"cpu({self.device_id})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, DECORDContext)
                and (other.device_type, other.device_id) == (self.device_type, self.device_id))

    def __hash__(self) -> int:
        return hash((self.device_type, self.device_id))


def cpu(dev_id: int = 0) -> DECORDContext:
    return DECORDContext(1, dev_id)


def gpu(dev_id: int = 0) -> DECORDContext:
    raise ValueError("fluxon_video.compat.decord decodes on the CPU only (gpu() is not "
                     "available); use cpu(0) and move the frames to the GPU")
