"""Depth cameras: 12-bit codes in a gray video, turned back into distances as
LeRobot turns them.

LeRobot records a depth camera (a feature whose ``info`` says
``is_depth_map``) by quantizing each distance to a 12-bit code, on a log
scale by default, and encoding the codes losslessly as a ``gray12le`` HEVC
video; the quantizer's parameters are in the feature's ``info``
(``video.depth_min``, ``video.depth_max``, ``video.shift``,
``video.use_log``). On read it decodes the codes and inverts the quantizer
with torch into float32 ``(1, H, W)`` in metres or, by default, whole
millimetres. The same torch operations run here, in the same order, on the
codes the reader decodes as coded (``read_gray16_numpy``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fluxon_video.errors import FluxonFsConfigError

UNITS = ("m", "mm")  # LeRobot's DEPTH_METER_UNIT, DEPTH_MILLIMETER_UNIT
DEFAULT_UNIT = "mm"
MM_PER_METRE = 1000.0
CODE_MAX = (1 << 12) - 1  # LeRobot's DEPTH_QMAX
UINT16_MAX = 65535


def depth_unit(unit: str) -> str:
    if unit not in UNITS:
        raise FluxonFsConfigError(f"depth_output_unit must be 'm' or 'mm', got {unit!r}")
    return unit


@dataclass(frozen=True)
class DepthQuantizer:
    """LeRobot's depth quantizer (its ``DepthEncoderConfig``), in metres."""

    depth_min: float = 0.01
    depth_max: float = 10.0
    shift: float = 3.5
    use_log: bool = True

    @classmethod
    def of_feature(cls, name: str, feature: dict[str, Any]) -> DepthQuantizer:
        """The parameters LeRobot wrote into the feature's ``info`` (its defaults
        for any it did not)."""
        info = feature.get("info") or {}
        given = {field: info[f"video.{field}"] for field in ("depth_min", "depth_max", "shift",
                                                             "use_log")
                 if info.get(f"video.{field}") is not None}
        quantizer = cls(**given)
        if quantizer.use_log and quantizer.depth_min + quantizer.shift <= 0:
            raise FluxonFsConfigError(f"{name}: depth_min + shift must be positive for log "
                                      f"quantization ({quantizer})")
        return quantizer

    def distances(self, codes: np.ndarray, unit: str) -> Any:
        """``codes`` (T, H, W) as LeRobot's ``dequantize_depth`` gives them:
        float32 (T, 1, H, W) in ``unit`` (millimetres rounded to whole ones)."""
        import torch

        if self.use_log:
            log_min = math.log(float(self.depth_min) + float(self.shift))
            log_max = math.log(float(self.depth_max) + float(self.shift))
            scale, offset = (log_max - log_min) / CODE_MAX, log_min
        else:
            scale = (float(self.depth_max) - float(self.depth_min)) / CODE_MAX
            offset = float(self.depth_min)
        out = torch.from_numpy(codes.astype(np.float32))
        out.mul_(scale).add_(offset)
        if self.use_log:
            out.exp_().sub_(float(self.shift))
        out.clamp_(float(self.depth_min), float(self.depth_max))
        out.unsqueeze_(-3)
        if unit == "mm":
            out.mul_(MM_PER_METRE).round_().clamp_(0.0, UINT16_MAX)
        return out


def rescale_stats(stats: dict[str, dict[str, np.ndarray]], features: dict[str, Any],
                  depth_keys: list[str], unit: str) -> None:
    """Depth statistics, recorded in the camera's ``depth_unit``, into ``unit``, in
    place: what LeRobot's ``rescale_depth_stats`` does, so they match the frames."""
    for key in depth_keys:
        stored = (features[key].get("info") or {}).get("depth_unit")
        if stored is None or stored == unit or key not in stats:
            continue
        factor = MM_PER_METRE if stored == "m" else 1.0 / MM_PER_METRE
        stats[key] = {stat: value if stat == "count" else value * factor
                      for stat, value in stats[key].items()}
