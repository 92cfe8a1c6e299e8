"""The scale path of the training stage: DeepSpeed ZeRO learners, Ray rollout workers, and the weight
hand-off from learners to generation engines (vLLM or mirl's own). Needs the `scale` extra."""
