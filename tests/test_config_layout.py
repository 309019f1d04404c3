"""The configuration package: one table of defaults, one staleness list (its import cost:
test_config_imports.py)."""

from __future__ import annotations

from storyd import config
from storyd.core import storytime
from storyd.server.service import Settings


def test_the_daemons_settings_default_to_the_configs_limits() -> None:
    limits = config.Limits()
    settings = Settings()
    assert settings.lock_timeout == limits.lock_timeout
    assert settings.max_workspaces == limits.max_workspaces
    assert settings.max_line_bytes == limits.max_line_bytes
    assert settings.settle == limits.settle_ms / 1000
    assert settings.verify_interval == limits.verify_interval
    assert settings.max_subscribers == limits.max_subscribers
    assert settings.subscriber_buffer == limits.subscriber_buffer
    assert settings.connection_buffer == limits.connection_buffer
    assert settings.total_buffer == limits.total_buffer
    assert settings.idle_timeout == limits.idle_timeout
    assert settings.staleness == config.DEFAULT_STALENESS


def test_one_list_of_staleness_modes() -> None:
    assert config.STALENESS_MODES is storytime.MODES
