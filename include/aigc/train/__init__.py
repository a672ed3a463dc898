"""Stage 2: distributed training under torchrun (``aigc train``), checkpoints that a retry resumes from."""
