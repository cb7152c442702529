"""Checkpoints: save_state/load_state in Accelerate's layout, automatic names and rotation,
save_model's safetensors shards."""
