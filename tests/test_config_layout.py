"""The configuration package: cheap to import, one table of defaults, one staleness list."""

from __future__ import annotations

import subprocess
import sys

from daemon import config, storytime
from daemon.server.service import Settings


def test_importing_config_loads_no_parser() -> None:
    """`storyd resume` imports daemon.config when a config file exists: tomllib, re and
    difflib wait until a file is read or checked."""
    code = "import sys, daemon.config; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert {"tomllib", "re", "difflib"} & set(out) == set()


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
    assert settings.staleness == config.DEFAULT_STALENESS


def test_one_list_of_staleness_modes() -> None:
    assert config.STALENESS_MODES is storytime.MODES
