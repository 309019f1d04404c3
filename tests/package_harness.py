"""The package as `pip install .` builds it: one wheel per test session.

    built_wheel      pytest fixture (session): the path of storyd's wheel, built from this
                     checkout with `pip wheel --no-deps` (setuptools, as a user's pip runs it)
    unpacked_wheel   pytest fixture (session): a folder holding the wheel's files, so the
                     house's rules can be checked on exactly what is installed

Registered as a plugin by tests/conftest.py.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

__all__ = ["REPO"]


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                           str(out), str(REPO)], capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob("storyd-*.whl")
    return wheel


@pytest.fixture(scope="session")
def unpacked_wheel(built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(built_wheel) as wheel:
        wheel.extractall(root)
    return root
