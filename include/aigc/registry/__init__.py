"""Stage 3: the model registry in the lake, its optimised variants, and safe loading."""

from aigc.registry.store import AliasError, Registry, RegistryCorrupt, VersionNotFound

__all__ = ["AliasError", "Registry", "RegistryCorrupt", "VersionNotFound"]
