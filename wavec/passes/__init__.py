"""The compiler passes; ``pipeline.PIPELINE`` is their order."""
