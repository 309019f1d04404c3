"""Another local user for cross-user tests: a uid to run processes as, and where it may go.

    python_for_others()  an interpreter another uid may execute (else the test skips)
    shared_dir           pytest fixture: a folder under /tmp another uid can traverse
    other_user           pytest fixture: (uid, gid) of a local user made for the run with
                         useradd, removed with userdel (skips unless root)

Registered as a plugin by tests/conftest.py, so the fixtures reach every test module.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["python_for_others"]


def python_for_others() -> str:
    """An interpreter another uid may run (this venv's base may live under /root)."""
    candidates = (os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3")
    for candidate in candidates:
        if os.path.exists(candidate) and os.stat(candidate).st_mode & 0o001 and all(
                os.stat(p).st_mode & 0o001 for p in Path(candidate).parents):
            return candidate
    pytest.skip("no Python interpreter that another uid may execute (every one found lives "
                "under a folder closed to other users)")
    raise AssertionError


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder under /tmp that another uid can traverse (tmp_path is 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="sdpeer", dir="/tmp"))
    os.chmod(folder, 0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def other_user() -> Iterator[tuple[int, int]]:
    """A second local user, made with useradd for this run and removed afterwards."""
    if os.getuid() != 0:
        pytest.skip(f"making and switching to another user needs root; running as uid "
                    f"{os.getuid()}")
    useradd, userdel = shutil.which("useradd"), shutil.which("userdel")
    if not useradd or not userdel:
        pytest.skip("useradd/userdel are not installed")
    name = f"sdtest{os.getpid() % 100000}"
    done = subprocess.run([useradd, "--system", "--no-create-home", "--shell",
                           "/usr/sbin/nologin", name], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        pytest.skip(f"useradd {name} failed: {done.stderr.strip()}")
    try:
        entry = pwd.getpwnam(name)
        yield entry.pw_uid, entry.pw_gid
    finally:
        subprocess.run([userdel, name], capture_output=True, check=False)
