"""storyd: a git-aware resume daemon for AI-agent orchestrators' state files.

This package is imported by the `storyd resume` hot path, so it imports nothing.
"""

__version__ = "0.1.0"
