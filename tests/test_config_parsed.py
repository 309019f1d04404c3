"""The parsed configuration kept between processes (storyd.config.parsed): a process
after the first imports no tomllib, any edit is seen (the cache is keyed on the file's
bytes, not its timestamps), and a cache that is broken, foreign or not a file is parsed
past, never trusted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from storyd.config import parsed

LOAD = """
import json, sys
from storyd import config
cfg = config.load(sys.argv[1])
print(json.dumps({"chars": cfg.hooks.context_chars, "roots": cfg.hooks.roots,
                  "tomllib": "tomllib" in sys.modules}))
"""


def _load(path: Path, cache: Path) -> dict[str, object]:
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    done = subprocess.run([sys.executable, "-c", LOAD, str(path)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_second_process_reads_the_parse_and_sees_every_edit(tmp_path: Path) -> None:
    config, cache = tmp_path / "config.toml", tmp_path / "cache"
    config.write_text('[hooks]\ncontext_chars = 4000\nroots = ["/srv"]\n', encoding="utf-8")
    first = _load(config, cache)
    assert first == {"chars": 4000, "roots": ["/srv"], "tomllib": True}
    assert len(list(cache.rglob("*.marshal"))) == 1
    assert _load(config, cache) == {"chars": 4000, "roots": ["/srv"], "tomllib": False}
    # the same size, the same mtime: the bytes differ, so the parse is not the old one
    before = config.stat()
    config.write_text('[hooks]\ncontext_chars = 5000\nroots = ["/srv"]\n', encoding="utf-8")
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert config.stat().st_size == before.st_size
    assert _load(config, cache) == {"chars": 5000, "roots": ["/srv"], "tomllib": True}
    assert _load(config, cache) == {"chars": 5000, "roots": ["/srv"], "tomllib": False}


def test_a_broken_or_foreign_cache_is_parsed_past(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = tmp_path / "config.toml"
    data = b'[hooks]\ncontext_chars = 4000\n'
    config.write_bytes(data)
    document = {"hooks": {"context_chars": 4000}}
    assert parsed.load(str(config), data) is None  # nothing kept yet
    parsed.save(str(config), data, document)
    kept = Path(parsed.cache_file(str(config)))
    assert kept.stat().st_mode & 0o777 == 0o600
    assert kept.parent.stat().st_mode & 0o777 == 0o700
    assert parsed.load(str(config), data) == document
    assert parsed.load(str(config), data + b"# edited\n") is None  # other bytes
    for broken in (b"", b"\x00garbage", b"\xe9" * 100):
        kept.write_bytes(broken)
        assert parsed.load(str(config), data) is None
    import marshal

    kept.write_bytes(marshal.dumps(["not", "a", "pair"]))
    assert parsed.load(str(config), data) is None
    kept.unlink()
    other = tmp_path / "other.marshal"
    other.write_bytes(marshal.dumps((parsed._digest(data), {"planted": True})))
    kept.symlink_to(other)  # a link is not followed
    assert parsed.load(str(config), data) is None


def test_what_marshal_cannot_hold_is_not_kept(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = str(tmp_path / "config.toml")
    parsed.save(config, b"x = 1979-05-27\n", {"x": datetime.date(1979, 5, 27)})
    parsed.save(config, b"x = nan\n", {"x": float("nan")})
    assert not os.path.exists(parsed.cache_file(config))


def test_a_read_only_cache_folder_costs_nothing_but_the_parse(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    from storyd import config as configuration

    path = tmp_path / "config.toml"
    path.write_text("[hooks]\ncontext_chars = 4321\n", encoding="utf-8")
    assert configuration.load(str(path)).hooks.context_chars == 4321
    assert configuration.load(str(path)).hooks.context_chars == 4321


def test_at_most_max_files_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    names = [str(tmp_path / f"c{n}.toml") for n in range(parsed.MAX_FILES + 5)]
    for age, name in enumerate(names[: parsed.MAX_FILES]):
        parsed.save(name, b"a = 1\n", {"a": 1})
        os.utime(parsed.cache_file(name), ns=(10**18 + age * 10**9,) * 2)  # 2001, in order
    for name in names[parsed.MAX_FILES :]:
        parsed.save(name, b"a = 1\n", {"a": 1})  # each one drops the oldest
    folder = Path(parsed.cache_file(names[0])).parent
    assert len(list(folder.glob("*.marshal"))) == parsed.MAX_FILES
    assert [parsed.load(n, b"a = 1\n") is not None for n in names] == (
        [False] * 5 + [True] * parsed.MAX_FILES)
