"""The configuration package: one table of defaults, one staleness list (its import cost:
test_config_imports.py)."""

from __future__ import annotations

from storyd import config
from storyd.core import storytime
from storyd.server.service import Settings


def test_the_daemons_settings_hold_the_configs_limits() -> None:
    limits = config.Limits()
    settings = Settings()
    assert settings.limits == limits
    assert settings.settle == limits.settle_ms / 1000
    assert settings.staleness == config.DEFAULT_STALENESS
    given = config.Limits(max_workspaces=3)
    assert Settings(given).limits is given  # held, not copied field by field


def test_keyword_limits_override_the_given_ones() -> None:
    settings = Settings(config.Limits(max_workspaces=3), verify_interval=0.5)
    assert settings.limits.max_workspaces == 3
    assert settings.limits.verify_interval == 0.5


def test_one_list_of_staleness_modes() -> None:
    assert config.STALENESS_MODES is storytime.MODES
