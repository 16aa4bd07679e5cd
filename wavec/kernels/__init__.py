"""The wavec kernel library (written against the public API only)."""
