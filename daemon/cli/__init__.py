"""The command line, `storyd …`: a door that renders the API layer's results. This
module finds the subcommand and runs it; each lives in daemon/cli/commands/<name>.py.
The dispatcher is the package itself, not a module in it: one module less on `storyd
resume`'s start-up path (docs/design.md, "The resume path stays cheap to start").

Subcommands are imported lazily, so `storyd resume` loads only what it needs.

COMMANDS is the one table of commands: a new command is one entry here (and one in
_MODULES when its module is named otherwise) plus daemon/cli/commands/<module>.py, whose
`main(argv)` runs it and whose FLAGS (or SUBCOMMANDS) spec `storyd completion` reads.
`-h`/`--help` after any command prints its usage and its module's docstring (the parser
raises HelpRequested); `storyd help COMMAND` is the same.

A command reports a failure by raising StorydError; `main` prints it once, here, as
`storyd <command>: <message>`, and exits with its code. A FlagError (an unknown flag, a
missing value) is printed as it is: its message already ends with the usage line.
"""

from __future__ import annotations

import os
import sys

from storyd.core.errors import FlagError, StorydError
from storyd.core.flags import HELP, HelpRequested

__all__ = ["COMMANDS", "did_you_mean", "main", "module_name"]

COMMANDS = {
    "resume": "resume one unit: the seed skill's flags, envelope and exit codes",
    "serve": "run the daemon in the foreground",
    "status": "every unit: progress, resume point and findings",
    "list": "units as JSON lines (the socket's list op)",
    "watch": "ask the daemon to watch workspaces",
    "unwatch": "ask the daemon to stop watching workspaces",
    "events": "follow drift, resolved and changed events",
    "check": "exit 1 when any unit has a warning or error finding",
    "reconcile": "write back what git proves: preview, --apply, --undo",
    "stats": "the daemon's counters",
    "ping": "whether a daemon answers, and its version",
    "demo": "serve the shipped demo workspace and query it",
    "install": "the user service (launchd on macOS, else systemd); --claude, --cursor, "
    "--vscode, --codex, --gemini, --skill: the agents' setup",
    "uninstall": "remove the user service (launchd or systemd); --claude, --cursor, "
    "--vscode, --codex, --gemini: the agents' setup",
    "config": "check the configuration file",
    "doctor": "one screen of what storyd sees on this machine",
    "epic": "one epic: stories reclassified as its producer resumes, executable next, blocked",
    "completion": "print the shell completion script for bash, zsh or fish",
    "hook": "every agent's hooks: session-start, stop, post-tool-use (JSON on stdin)",
    "mcp": "the MCP server over stdio (needs the `mcp` extra)",
    "fleet": "units and events of every machine, read from NATS (storyd[fleet])",
    "history": "a unit's versions and what changed in each; --accept a regressed one",
    "top": "every unit on one screen, live (storyd[tui]); --once prints one frame",
    "claim": "take a unit or task for an owner: a lease and a fencing token (75: held)",
    "release": "give back a claim",
    "claims": "who holds which unit or task, and the abandoned leases",
}
_MODULES = {"list": "listing", "config": "config_check", "mcp": "mcp_serve"}
_SEE_HELP = "see 'storyd --help' for the commands"


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()]
    return (
        "usage: storyd <command> [flags]\n"
        "       storyd <command> --help | storyd help <command>\n"
        "       storyd --version\n\ncommands:\n" + "\n".join(lines) + "\n"
    )


def module_name(command: str) -> str:
    """The module that runs `command`."""
    return f"storyd.cli.commands.{_MODULES.get(command, command)}"


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand and return its exit code."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["help"] and len(args) > 1:
        args = [args[1], "--help"]  # `storyd help serve` is `storyd serve --help`
    if not args or args[0] in (*HELP, "help"):
        os.write(1 if args else 2, _usage().encode())
        return 0 if args else 64
    if args[0] == "--version":
        from storyd import __version__

        os.write(1, f"storyd {__version__}\n".encode())
        return 0
    name = args[0]
    if name not in COMMANDS:
        hint = did_you_mean(name, [*COMMANDS, "help"])
        # two lines, as git gives: the error with the closest names, and where help is
        os.write(2, f"storyd: unknown command {name!r}{hint}\n{_SEE_HELP}\n".encode())
        return 64
    if name != "hook":
        return _run(name, args)
    # an agent's hook: milliseconds whose objects die with them (bin/storyd ends the
    # process with os._exit); the cyclic collector's passes over ~200 modules' objects as
    # they are imported cost post-tool-use 0.8 ms of its 16 (issue 31). Paused, not
    # switched off: a caller in-process gets it back.
    import gc

    paused = gc.isenabled()
    gc.disable()
    try:
        return _run(name, args)
    finally:
        if paused:
            gc.enable()


def _run(name: str, args: list[str]) -> int:
    """Import the command's module and run it: its exit code, its errors printed once."""
    found = module_name(name)
    __import__(found)  # importlib itself costs start-up time on `storyd resume`
    module = sys.modules[found]
    try:
        code = int(module.main(args[1:]))
        sys.stdout.flush()  # here, not at exit: a closed pipe is then caught below
        return code
    except HelpRequested as exc:
        os.write(1, exc.text(module.__doc__).encode())
        return 0
    except FlagError as exc:
        sys.stderr.write(exc.message + "\n")
        return exc.code
    except StorydError as exc:
        sys.stderr.write(f"storyd {name}: {exc.message}\n")
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _closed_pipe()


def did_you_mean(word: str, known: list[str]) -> str:
    """` (did you mean 'x'?)` for the closest of `known`, or nothing, as git does: two
    when they are nearly as close (a transposition such as `stauts` first)."""
    import difflib

    def ratio(name: str) -> float:
        return difflib.SequenceMatcher(None, word, name).ratio()

    close = difflib.get_close_matches(word, known, n=2, cutoff=0.6)
    close = [name for name in close if ratio(name) >= ratio(close[0]) - 0.1]
    close.sort(key=lambda name: sorted(name) != sorted(word))  # stable: else by ratio
    if not close:
        return ""
    return " (did you mean " + " or ".join(map(repr, close)) + "?)"


def _closed_pipe() -> int:
    """The reader went away (`storyd doctor | head -3`): exit quietly, as `cat` does.

    Python would otherwise flush stdout again at exit and print "Exception ignored ...
    BrokenPipeError": stdout is pointed at /dev/null first.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 141


if __name__ == "__main__":
    sys.exit(main())
