"""Stage 4: prompts → images with the registry's model, adaptively batched, sharded, cached, exactly once."""
