from rft.rollout.base import RolloutEngine, RolloutOutput, SamplingParams, StreamRequest, StreamResponse
from rft.rollout.hf import HFRollout

__all__ = ["HFRollout", "RolloutEngine", "RolloutOutput", "SamplingParams", "StreamRequest", "StreamResponse"]
