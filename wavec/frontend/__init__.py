"""The DSL: symbols, dtypes, tensor types, ops, constraints and tracing."""
