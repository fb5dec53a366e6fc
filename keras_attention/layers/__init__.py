"""One public attention layer (or small family) per module."""
