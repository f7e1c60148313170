"""The tensor language model: a GPT-2 that writes schedules, its checkpoints and training."""
