"""A detector plugin whose import fails, as a plugin with a missing dependency would."""

from __future__ import annotations

import storyd_no_such_dependency  # noqa: F401

DETECTOR = None
