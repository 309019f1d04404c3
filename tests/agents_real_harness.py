"""The agents' own programs, run against a scripted model (tests/mock_models.py).

    AGENTS          Claude Code, Codex CLI and Gemini CLI: the npm package and the pinned
                    version each test runs, and the model API each speaks
    Installs        installs each package once per machine (`npm install --prefix` into
                    ~/.cache/storyd-tests/agents/NAME@VERSION, or $STORYD_AGENTS_CACHE);
                    without npm, or when the registry cannot be reached, the test is
                    skipped with npm's own reason
    Session         a demo workspace with `storyd install --AGENT --project` done, a home
                    of its own, and `run(script)`: the agent, non-interactive, against a
                    MockModel; nothing may leave 127.0.0.1 (the mock is the agents'
                    proxy too, and records any try at another host)
    no_python()     an environment in which any Python storyd that starts fails loudly,
                    so a hook answered with the daemon up is proved the daemon's
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, no_python
from cli_harness import STORYD
from mock_models import MockModel, Step

__all__ = ["AGENTS", "Agent", "Installs", "Ran", "Session", "no_python"]

CACHE = Path(os.environ.get("STORYD_AGENTS_CACHE")
             or Path.home() / ".cache" / "storyd-tests" / "agents")  # fmt: skip
NPM_TIMEOUT = 100.0  # under pytest's 120 s; .ci/run installs them before pytest starts
RUN_TIMEOUT = 90.0


@dataclass(frozen=True, slots=True)
class Agent:
    """One agent's npm package, pinned, and how storyd and the mock know it."""

    name: str  # storyd install's flag: --claude, --codex, --gemini
    package: str
    version: str
    program: str  # the executable the package installs
    dialect: str  # the mock's dialect (mock_models)

    @property
    def folder(self) -> Path:
        """Where it is installed: the cache's NAME@VERSION."""
        return CACHE / f"{self.package.rsplit('/', 1)[-1]}@{self.version}"

    @property
    def executable(self) -> Path:
        """The installed program."""
        return self.folder / "node_modules" / ".bin" / self.program


AGENTS = {
    "claude": Agent("claude", "@anthropic-ai/claude-code", "2.1.197", "claude", "anthropic"),
    "codex": Agent("codex", "@openai/codex", "0.171.0", "codex", "responses"),
    "gemini": Agent("gemini", "@google/gemini-cli", "0.61.0", "gemini", "gemini"),
}


class Installs:
    """Each agent installed once; a failure is remembered, and every test asking for
    that agent is skipped with it."""

    def __init__(self) -> None:
        self._failed: dict[str, str] = {}

    def program(self, name: str) -> Path:
        """The agent's executable, installed now if it is not yet; else skip."""
        agent = AGENTS[name]
        if name in self._failed:
            pytest.skip(self._failed[name])
        if not agent.executable.exists():
            reason = _npm_install(agent)
            if reason is not None:
                self._failed[name] = reason
                pytest.skip(reason)
        return agent.executable


def _npm_install(agent: Agent) -> str | None:
    """Install the pinned package into its folder (under a lock, so two runs do not
    race); None when done, else why not, in one line."""
    npm = shutil.which("npm")
    spec = f"{agent.package}@{agent.version}"
    if npm is None or shutil.which("node") is None:
        return f"{spec}: npm or node is not on PATH"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if agent.executable.exists():
            return None
        partial = agent.folder.with_name(agent.folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            done = subprocess.run(
                [npm, "install", "--prefix", str(partial), "--no-audit", "--no-fund",
                 "--loglevel=error", spec], capture_output=True, text=True,
                timeout=NPM_TIMEOUT, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            return f"{spec}: npm install took over {NPM_TIMEOUT:g} s (registry unreachable?)"
        if done.returncode != 0:
            last = [line for line in done.stderr.splitlines() if line.strip()][-1:] or ["?"]
            return f"{spec}: npm install failed: {last[0].strip()}"
        partial.rename(agent.folder)
    return None


@dataclass(frozen=True, slots=True)
class Ran:
    """One finished agent run: what it printed and what the model was sent."""

    done: subprocess.CompletedProcess[str]
    model: MockModel


Launch = Callable[[Path, str, Path, Path, str], tuple[list[str], dict[str, str]]]


class Session:
    """A fresh demo workspace (storyd's hooks installed for `agent` in the project) in
    which the agent runs against a scripted model."""

    def __init__(self, name: str, program: Path, root: Path) -> None:
        self.agent = AGENTS[name]
        self.program = program
        self.root = root
        self.ws = demo_workspace(root)
        self.storyd = AgentsEnv(root)
        self.home = root / "home"
        self.home.mkdir()
        self.env = dict(self.storyd.env, HOME=str(self.home), GIT_AUTHOR_NAME="t",
                        GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                        GIT_COMMITTER_EMAIL="t@t")  # the agent's shell may commit
        done = subprocess.run([STORYD, "install", f"--{name}", "--project", str(self.ws)],
                              env=self.env, capture_output=True, text=True, timeout=60,
                              check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr

    def git(self, *args: str) -> str:
        """git in the workspace, as its author."""
        done = subprocess.run(["git", "-C", str(self.ws), "-c", "user.name=t",
                               "-c", "user.email=t@t", *args], capture_output=True,
                              text=True, timeout=30, check=True)  # fmt: skip
        return done.stdout.strip()

    def run(self, script: list[Step], prompt: str = "Carry on with the story.",
            env: dict[str, str] | None = None) -> Ran:
        """The agent, non-interactive, in the workspace, against a model following
        `script`; it must end with exit 0 and try no other host."""
        with MockModel(self.agent.dialect, script) as model:
            argv, extra = _LAUNCHERS[self.agent.name](self.program, model.url, self.ws,
                                                      self.home, prompt)  # fmt: skip
            run_env = dict(env if env is not None else self.env, **extra, **_offline(model.url))
            done = subprocess.run(argv, cwd=self.ws, env=run_env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=RUN_TIMEOUT,
                                  check=False)  # fmt: skip
        assert done.returncode == 0, f"{self.agent.program} exited {done.returncode}:\n" \
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"  # fmt: skip
        assert model.strays == [], model.strays
        return Ran(done, model)


def _offline(url: str) -> dict[str, str]:
    """Every agent's proxy is the mock (it refuses and records other hosts); its own
    address is reached directly."""
    return {
        "HTTPS_PROXY": url, "HTTP_PROXY": url, "https_proxy": url, "http_proxy": url,
        "ALL_PROXY": url, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    }  # fmt: skip


def _claude(program: Path, url: str, ws: Path, home: Path,
            prompt: str) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """`claude -p` (print mode, JSON result), the project's .claude/settings.json hooks,
    no MCP servers, the file and shell tools allowed without asking."""
    del ws, home
    argv = [str(program), "-p", prompt, "--output-format", "json", "--strict-mcp-config",
            "--allowedTools", "Read,Write,Edit,Bash"]  # fmt: skip
    return argv, {
        "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-mock",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
    }  # fmt: skip


# features that reach other hosts: ChatGPT's connectors and plugin catalogues (github.com)
_CODEX_OFF = ("apps", "plugins", "remote_plugin", "plugin_sharing", "tool_suggest",
              "in_app_updates", "api_key_model_discovery", "enable_request_compression")


def _codex(program: Path, url: str, ws: Path, home: Path,
           prompt: str) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """`codex exec` with a model provider of the mock's (Responses API), the project
    trusted (Codex loads a project's .codex/ hooks only then) and its hooks run without
    the per-hook review (`--dangerously-bypass-hook-trust`, for automation)."""
    codex_home = home / ".codex"
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "gpt-5.5"\nmodel_provider = "mock"\n'  # a model it knows: apply_patch
        "check_for_update_on_startup = false\n"
        "[model_providers.mock]\n"
        f'name = "mock"\nbase_url = "{url}/v1"\nwire_api = "responses"\n'
        'env_key = "MOCK_API_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
        "[analytics]\nenabled = false\n"
        f"[projects.{_toml_key(str(ws))}]\ntrust_level = \"trusted\"\n"
    )
    argv = [str(program), "exec", "--dangerously-bypass-approvals-and-sandbox",
            "--dangerously-bypass-hook-trust", "--color", "never",
            *(a for f in _CODEX_OFF for a in ("--disable", f)), prompt]  # fmt: skip
    return argv, {"CODEX_HOME": str(codex_home), "MOCK_API_KEY": "sk-mock"}


def _toml_key(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _gemini(program: Path, url: str, ws: Path, home: Path,
            prompt: str) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """`gemini -p` (`--yolo`: tools without asking) with the Gemini API at the mock, the
    project's .gemini/settings.json hooks, telemetry and update checks off."""
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(exist_ok=True)
    settings.write_text(orjson.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }).decode())  # fmt: skip
    del ws
    argv = [str(program), "-p", prompt, "--yolo", "--output-format", "json",
            "--model", "gemini-2.5-flash"]  # a model named: no routing call first
    return argv, {"GEMINI_API_KEY": "mock-key", "GOOGLE_GEMINI_BASE_URL": url,
                  "GEMINI_CLI_NO_RELAUNCH": "true"}  # fmt: skip


_LAUNCHERS: dict[str, Launch] = {"claude": _claude, "codex": _codex, "gemini": _gemini}
