"""What leaves the machine: a unit's summary and an event, each a whitelist of fields.

Only what `fleet status` shows goes out: machine, workspace, the repository's remote
(without any user or token) and branch, the unit, its resume point, progress and
findings (counts, worst severity, codes), its claim when it has one (holder, token,
grant, lease end, live or abandoned: storyd.api.claimview's field, without what storyd
last saw), and when. No file contents, no environment.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from storyd.core.children import group

__all__ = ["Repos", "event_payload", "public_remote", "unit_summary"]

_LABEL_MAX = 200
_REPO_TTL = 10.0  # seconds a workspace's remote and branch are reused


def now_iso(stamp: float | None = None) -> str:
    """UTC time with milliseconds, as the summaries and events carry it."""
    stamp = time.time() if stamp is None else stamp
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp)) + f".{int(stamp % 1 * 1000):03d}Z"


def public_remote(url: str | None) -> str | None:
    """A remote URL without its user, password or token (`https://tok@host/x` -> `https://host/x`)."""
    if not url:
        return None
    if "://" not in url:
        return url  # scp-like `git@host:path`: the user is the ssh account, no secret
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class Repos:
    """Each workspace's remote (origin, else the first) and branch, read with git, cached."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[float, str | None, str | None]] = {}

    def __call__(self, workspace: str) -> tuple[str | None, str | None]:
        now = time.monotonic()
        cached = self._cache.get(workspace)
        if cached is not None and now - cached[0] < _REPO_TTL:
            return cached[1], cached[2]
        remote = public_remote(_git(workspace, "remote", "get-url", "origin"))
        if remote is None:
            names = (_git(workspace, "remote") or "").split()
            if names:
                remote = public_remote(_git(workspace, "remote", "get-url", names[0]))
        branch = _git(workspace, "symbolic-ref", "--short", "-q", "HEAD")
        self._cache[workspace] = (now, remote, branch)
        return remote, branch


def _git(workspace: str, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", workspace, *args],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
            process_group=group(),  # git ends with the daemon
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = done.stdout.strip()
    return out if done.returncode == 0 and out else None


def _labels(source: Mapping[str, object], known: set[str]) -> dict[str, str]:
    """A format's labels (epic, story, ...): short strings not among the known fields."""
    return {
        k: v[:_LABEL_MAX]
        for k, v in source.items()
        if k not in known and isinstance(v, str) and k not in _DROP
    }


_FIELDS = {
    "workspace", "format", "stateFile", "unit", "done", "total", "resumePoint",
    "findings", "worst", "generation", "error", "findingList", "event", "clock",
    "finding", "source", "repairs", "claim",
}  # fmt: skip
_CLAIM = ("owner", "token", "granted", "expires", "state", "task")  # of a `claim` field
_DROP = {"error"}


def unit_summary(
    machine: str,
    source: Mapping[str, object],
    codes: list[str],
    repo: tuple[str | None, str | None],
    when: str,
) -> dict[str, object]:
    """The KV value of one unit, from an engine summary or a `changed` event (with its
    `claim` field when storyd.api.claimview attached one)."""
    out: dict[str, object] = {
        "machine": machine,
        "workspace": source.get("workspace"),
        "remote": repo[0],
        "branch": repo[1],
        "format": source.get("format"),
        "stateFile": source.get("stateFile"),
        "unit": source.get("unit"),
        "labels": _labels(source, _FIELDS),
        "done": source.get("done"),
        "total": source.get("total"),
        "resumePoint": source.get("resumePoint"),
        "findings": source.get("findings"),
        "worst": source.get("worst"),
        "codes": codes,
        "unreadable": bool(source.get("error")),
        "generation": source.get("generation"),
        "when": when,
    }
    claim = source.get("claim")
    if isinstance(claim, Mapping):
        out["claim"] = {k: claim[k] for k in _CLAIM if k in claim}
    return out


def event_payload(
    machine: str, seq: int, event: Mapping[str, object], when: str
) -> dict[str, object]:
    """The stream message of one daemon event."""
    body: dict[str, object] = {
        "machine": machine,
        "seq": seq,
        "event": event.get("event"),
        "clock": event.get("clock"),
        "workspace": event.get("workspace"),
        "stateFile": event.get("stateFile"),
        "unit": event.get("unit"),
        "format": event.get("format"),
        "when": when,
    }
    finding = event.get("finding")
    if isinstance(finding, Mapping):
        body["finding"] = {
            k: finding.get(k) for k in ("detector", "code", "severity", "task", "message")
        }
    if event.get("event") == "changed":
        for k in ("done", "total", "resumePoint", "findings", "worst"):
            body[k] = event.get(k)
    if event.get("event") == "reconciled":
        body["source"] = event.get("source")
        repairs = event.get("repairs")
        body["repairs"] = (
            [r.get("code") for r in repairs if isinstance(r, Mapping)]
            if isinstance(repairs, list)
            else []
        )
    return body
