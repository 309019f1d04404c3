"""Native Windows: `storyd` and `python -m storyd` refuse in one line (exit 69) instead of
failing on `import fcntl`; the package metadata and the README say which systems run it.

Windows is stood in for by setting `os.name = "nt"` before the launcher runs (this is
Linux): the launcher must decide before it imports anything of storyd's CLI."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from cli_harness import REPO

from storyd.core.unsupported import EX_UNAVAILABLE, WINDOWS

LAUNCHER = REPO / "bin" / "storyd"
# storyd itself (it imports nothing) is found first: an editable install's finder makes
# a pathlib.Path, which cannot be made once os.name says "nt" on Linux
AS_WINDOWS = "import os, runpy, sys, storyd; os.name = 'nt'; "


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, "status"], capture_output=True,
                          text=True, timeout=30, check=False)  # fmt: skip


class TestRefusal:
    """One line on stderr, nothing on stdout, exit 69, no traceback."""

    def test_launcher(self) -> None:
        done = _run(AS_WINDOWS + f"runpy.run_path({str(LAUNCHER)!r}, run_name='__main__')")
        assert (done.returncode, done.stdout, done.stderr) == (EX_UNAVAILABLE, "", WINDOWS + "\n")

    def test_before_the_cli(self) -> None:
        """Nothing of the CLI (which imports fcntl) is imported first."""
        done = _run(AS_WINDOWS + "import atexit; atexit.register(lambda: print("
                    "sorted(m for m in sys.modules if m.startswith('storyd.cli')))); "
                    f"runpy.run_path({str(LAUNCHER)!r}, run_name='__main__')")  # fmt: skip
        assert done.stdout == "[]\n"

    def test_python_m_storyd(self) -> None:
        done = _run(AS_WINDOWS + "runpy.run_module('storyd', run_name='__main__')")
        assert (done.returncode, done.stdout, done.stderr) == (EX_UNAVAILABLE, "", WINDOWS + "\n")

    def test_not_imported_elsewhere(self) -> None:
        done = _run(f"import runpy, sys; sys.argv[1:] = ['--version']; "
                    f"runpy.run_path({str(LAUNCHER)!r}, run_name='__main__')")  # fmt: skip
        assert "Windows" not in done.stderr


def test_metadata_says_which() -> None:
    """Classifiers name POSIX systems only, and the README's platform line says Windows
    runs storyd through WSL2."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    systems = {c for c in project["classifiers"] if c.startswith("Operating System")}
    assert systems == {"Operating System :: POSIX :: Linux", "Operating System :: MacOS"}
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert "native Windows is not supported" in readme and "WSL2" in readme
