"""[claims] ttl (issue 45): parsed and checked like every key (its field, its line, a
clear message), the default lease of `storyd claim` when --ttl is not given, and
$STORYD_CLAIM_TTL overriding it."""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace
from cli_harness import STORYD
from daemon_harness import write_config
from epic_state_harness import EPIC, STORY

from storyd import config
from storyd.api import claims
from storyd.config import ConfigError

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


class TestKey:
    """The key as config.load reads it."""

    def test_absent_table_is_the_default(self, tmp_path: Path) -> None:
        assert config.load(write(tmp_path, 'staleness = "git"\n')).claims is None

    @pytest.mark.parametrize(("written", "ttl"), [("60", 60.0), ("1.5", 1.5), ("604800", 604800.0)])
    def test_seconds(self, tmp_path: Path, written: str, ttl: float) -> None:
        cfg = config.load(write(tmp_path, f"[claims]\nttl = {written}\n"))
        assert cfg.claims is not None and cfg.claims.ttl == ttl
        assert cfg.as_dict()["claims"] == {"ttl": ttl}

    def test_an_empty_table_is_the_default_lease(self, tmp_path: Path) -> None:
        cfg = config.load(write(tmp_path, "[claims]\n"))
        assert cfg.claims is not None and cfg.claims.ttl == claims.DEFAULT_TTL

    @pytest.mark.parametrize(("text", "field", "line", "message"), [
        ("[claims]\nttl = 0\n", "claims.ttl", 2, "0 is out of range: expected 1 to 604800"),
        ("[claims]\nttl = 700000\n", "claims.ttl", 2,
         "700000 is out of range: expected 1 to 604800"),
        ('[claims]\nttl = "15m"\n', "claims.ttl", 2, "expected a number, got a string"),
        ("[claims]\nttl = inf\n", "claims.ttl", 2, "expected a finite number, got inf"),
        ("[claims]\nttl = true\n", "claims.ttl", 2, "expected a number, got a boolean"),
        ("[claims]\nttls = 60\n", "claims.ttls", 2, "unknown key 'ttls' (did you mean 'ttl'?)"),
        ("claims = 60\n", "claims", 1, "expected a table, got an integer"),
    ])  # fmt: skip
    def test_problems(self, tmp_path: Path, text: str, field: str, line: int,
                      message: str) -> None:  # fmt: skip
        with pytest.raises(ConfigError) as caught:
            config.load(write(tmp_path, text))
        found = [(p.field, p.line, p.message) for p in caught.value.problems]
        assert found == [(field, line, message)]

    def test_config_check_names_the_key_and_its_line(self, run_storyd: Run,
                                                     tmp_path: Path) -> None:  # fmt: skip
        path = write(tmp_path, "[hooks]\n\n[claims]\nttl = -5\n")
        done = run_storyd("config", "check", "--file", path)
        assert done.returncode == 78
        assert done.stdout.decode().splitlines() == [
            f"{path}:4: claims.ttl: -5 is out of range: expected 1 to 604800",
        ]


class TestDefaultLease:
    """--ttl, then $STORYD_CLAIM_TTL, then [claims] ttl, then 900 s."""

    @pytest.fixture
    def configured(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
        monkeypatch.delenv("STORYD_CLAIM_TTL", raising=False)
        return write_config(tmp_path, "[claims]\nttl = 42\n")

    def test_the_order(self, configured: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        assert claims.ttl_seconds(None) == 42.0
        assert claims.ttl_seconds("7") == 7.0
        assert claims.ttl_seconds(None, configured=30.0) == 30.0
        monkeypatch.setenv("STORYD_CLAIM_TTL", "9")
        assert claims.ttl_seconds(None) == 9.0
        assert claims.ttl_seconds("7") == 7.0

    def test_no_file_is_the_default(self, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nothing"))
        monkeypatch.delenv("STORYD_CLAIM_TTL", raising=False)
        assert claims.ttl_seconds(None) == claims.DEFAULT_TTL

    def test_a_broken_file_is_its_config_error(self, configured: Path) -> None:
        configured.write_text("[claims]\nttl = 0\n")
        with pytest.raises(ConfigError):
            claims.ttl_seconds(None)

    @pytest.mark.slow
    def test_storyd_claim_takes_the_configured_lease(self, tmp_path: Path) -> None:
        ws, env = demo_workspace(tmp_path), AgentsEnv(tmp_path)
        env.config("", extra="[claims]\nttl = 120\n")
        env.env.pop("STORYD_CLAIM_TTL", None)

        def claim(*args: str) -> dict[str, object]:
            done = subprocess.run([STORYD, "claim", "--workspace", str(ws), "--epic-id", EPIC,
                                   "--story-id", STORY, "--json", *args], env=env.env,
                                  capture_output=True, timeout=60, check=False)  # fmt: skip
            assert done.returncode == 0, done.stderr
            return orjson.loads(done.stdout)  # type: ignore[no-any-return]

        assert _seconds(claim("--owner", "a", "--task", "1")) == pytest.approx(120, abs=5)
        env.env["STORYD_CLAIM_TTL"] = "60"  # the environment overrides the file
        assert _seconds(claim("--owner", "b", "--task", "2")) == pytest.approx(60, abs=5)
        assert _seconds(claim("--owner", "c", "--task", "3", "--ttl", "30")) == pytest.approx(
            30, abs=5)  # fmt: skip


def _seconds(claimed: dict[str, object]) -> float:
    """The lease's length, from the ISO times a grant's --json line gives."""
    import datetime

    end = datetime.datetime.fromisoformat(str(claimed["expires"]).replace("Z", "+00:00"))
    return (end - datetime.datetime.now(datetime.UTC)).total_seconds()


class TestLoadClaims:
    """config.load_claims: the [claims] table alone, as a claim reads it."""

    def test_only_the_claims_table_is_checked(self, tmp_path: Path) -> None:
        path = write(tmp_path, "staleness = 3\n[claims]\nttl = 30\n")
        table = config.load_claims(path)
        assert table is not None and table.ttl == 30.0  # another key's problem: not its

    def test_no_file_or_no_table_is_none(self, tmp_path: Path) -> None:
        assert config.load_claims(str(tmp_path / "absent.toml")) is None
        assert config.load_claims(write(tmp_path, "[hooks]\n")) is None

    def test_its_own_problem_raises(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError) as caught:
            config.load_claims(write(tmp_path, "[claims]\nttl = 0\n"))
        assert [(p.field, p.line) for p in caught.value.problems] == [("claims.ttl", 2)]
