"""`import storyd.config` stays cheap: tomllib, re and difflib wait until a file is read,
checked or located.

`storyd resume` imports storyd.config whenever a configuration file exists, so the
package and its modules (values, loader, checker, lines) import those parsers inside
the functions that need them. Each run is `python -S -X importtime -c "import …"`: `-S`
keeps site's own imports (an editable install's finder imports `re`) out of the
measure, so every module listed was imported by the statement itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import lean_pythonpath

REPO = Path(__file__).resolve().parents[1]
PARSERS = frozenset(("tomllib", "re", "difflib"))
MODULES = ("storyd.config", "storyd.config.values", "storyd.config.loader",
           "storyd.config.checker", "storyd.config.lines")


def imported(statement: str) -> list[str]:
    """Every module `statement` imported, in -X importtime's order."""
    done = subprocess.run([sys.executable, "-S", "-X", "importtime", "-c", statement],
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=lean_pythonpath()),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:") and "imported package" not in line]


class TestImportCost:
    """Importing the configuration package or any of its modules loads no parser."""

    @pytest.mark.parametrize("module", MODULES)
    def test_no_parser_at_import(self, module: str) -> None:
        names = imported(f"import {module}")
        assert module in names, "the run did not import the module"
        assert sorted(PARSERS.intersection(names)) == []

    @pytest.mark.parametrize("parser", sorted(PARSERS))
    def test_the_check_can_fail(self, parser: str) -> None:
        """The measure sees each parser when it is imported (so a pass means something)."""
        assert parser in imported(f"import storyd.config, {parser}")
