"""`storyd resume`: the seed skill's drop-in, asking the daemon first.

Its help text is daemon.query.ABOUT, which the daemon's `resume-cli` op prints too.
"""

from __future__ import annotations

import os

from daemon.errors import UsageError
from daemon.query import FLAGS, USAGE, Output, Query, from_argv

__all__ = ["FLAGS", "USAGE", "emit", "main"]


def emit(output: Output) -> int:
    """Print an Output (stderr lines, then stdout) and return its exit code."""
    if output.stderr:
        os.write(2, "".join(line + "\n" for line in output.stderr).encode("utf-8", "replace"))
    if output.stdout:
        os.write(1, output.stdout)
    return output.code


def main(argv: list[str]) -> int:
    """Parse the flags, ask the daemon unless --direct, else read the files."""
    cwd = os.getcwd()
    try:
        query = from_argv(argv, cwd)
    except UsageError as exc:
        return emit(Output(exc.code, b"", tuple(exc.message.split("\n"))))
    if not query.direct:
        from daemon.client import ask_cli
        from daemon.paths import socket_path

        answered = ask_cli(socket_path(query.socket), argv, cwd, query.timeout)
        if answered is not None:
            return emit(answered)
    return emit(_read_directly(query))


def _configured_staleness(path: str | None) -> str:
    """The configuration's staleness mode; without a file, `git` (and no config module import).

    A --config file that does not exist is an error here (reported as a warning by the
    caller), where the default file may be absent.
    """
    from daemon.paths import config_path
    from daemon.storytime import DEFAULT_MODE

    if path is None and not os.path.exists(config_path()):
        return DEFAULT_MODE
    if path is not None and not os.path.isfile(path):
        from daemon.errors import SetupError

        raise SetupError(f"--config {path}: no such file")
    from daemon import config

    return config.load_staleness(path)


def _read_directly(query: Query) -> Output:
    """The direct read, in the configured staleness mode; detectors only for --detail."""
    from daemon import answers
    from daemon.errors import StorydError

    warnings: tuple[str, ...] = ()
    try:
        staleness = _configured_staleness(query.config)
    except StorydError as exc:  # a broken config must not break the seed's contract
        from daemon.storytime import DEFAULT_MODE

        staleness = DEFAULT_MODE
        warnings = (f"warn: {exc.message.splitlines()[0]}; using the default staleness",)
    if not query.detail:
        output = answers.run(query, staleness)
    else:
        from daemon.server.wiring import build_detect

        try:
            from daemon import config

            detect, runner = build_detect(config.load(query.config), query.staleness or staleness)
        except StorydError as exc:
            return Output(exc.code, b"", (exc.message,))
        try:
            output = answers.run(query, staleness, detect)
        finally:
            runner.close()
    output.stderr = warnings + output.stderr
    return output
