"""LeRobot v3 datasets read by fluxon_video: ``LeRobotDataset`` serves items as
LeRobot's class of that name does, from a local folder or through FluxonFS
(docs/lerobot.md). Needs pyarrow (``pip install 'fluxon_video[lerobot]'``) and,
for tensors, torch."""

from fluxon_video.batch_plan import SeededBatchSampler
from fluxon_video.lerobot.dataset import LeRobotDataset
from fluxon_video.lerobot.files import DatasetFiles
from fluxon_video.lerobot.meta import Episode, LeRobotDatasetMetadata

__all__ = ["DatasetFiles", "Episode", "LeRobotDataset", "LeRobotDatasetMetadata",
           "SeededBatchSampler"]
