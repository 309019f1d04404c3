"""A direct scan that reads only some finding codes (the stop hook's `block_stop_on`)
dates story files through git only when a finding it reads can depend on those dates
(storyd.api.detection.dates_read): the staleness detector's, or any third-party
detector's, since it may read the envelope's staleWarnings.

Each case runs in a fresh interpreter (the registry is read once per process), with a
third-party distribution on PYTHONPATH where the case needs one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ASK = "from storyd.api.detection import dates_read; print(dates_read({codes}))"
PLUGIN = """
class Reader:
    name = "reads-dates"
    codes = ("read-dates",)

    def check(self, unit, context):
        return []


DETECTOR = Reader()
"""


def _dates_read(codes: str, pythonpath: Path | None = None) -> str:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run([sys.executable, "-c", ASK.format(codes=codes)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ("None", "True"),  # every code is read: status, check, session-start
        ("frozenset({'unrecorded'})", "False"),  # stop's default: no date reaches it
        ("frozenset({'unrecorded', 'stale'})", "True"),  # the staleness detector's code
    ],
)
def test_storyds_own_detectors(codes: str, expected: str) -> None:
    assert _dates_read(codes) == expected


def test_a_third_party_detector_keeps_the_dates(tmp_path: Path) -> None:
    """A plugin may read context.envelope's staleWarnings: the dates are asked for."""
    site = tmp_path / "site"
    dist = site / "dates_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dates-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[storyd.detectors]\nreads-dates = dates_plugin:DETECTOR\n")
    (site / "dates_plugin.py").write_text(PLUGIN)
    assert _dates_read("frozenset({'unrecorded'})", site) == "True"
    assert _dates_read("frozenset({'unrecorded'})") == "False"  # the same, without it
