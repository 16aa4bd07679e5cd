"""Adapters that route third-party model code through the wavec kernel library.

``wavec.integrations.transformers``: Hugging Face transformers models (RMSNorm, attention, MoE experts).
Each adapter imports its framework only when imported itself.
"""
