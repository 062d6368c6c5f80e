"""The dual GPU cache (features and adjacency): profiling first.

- ``profile``: full-link offline access profiling (GARDEN eq. 4).
"""
from .profile import AccessProfile, depth_weights, profile_accesses

__all__ = ["AccessProfile", "depth_weights", "profile_accesses"]
