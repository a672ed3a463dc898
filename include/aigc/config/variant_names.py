"""The variant names a configuration may use: a leaf module, so that the form's table and the stages' settings both
read them without importing each other."""

VARIANTS = ("fp32", "bf16", "pruned", "int8dyn", "onnx", "int8")
AUTO = "auto"
"""``generate.variant``: the worker's device chooses (``registry.loader.served_variant``)."""
