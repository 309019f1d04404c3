"""Properties of the resume envelope over generated state files, and parity with the reference."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from time import gmtime

import pytest
from cli_harness import STORYD, run_reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storyd.api.answers import Options, answer
from storyd.core.formats.epic import ADAPTER

pytestmark = pytest.mark.slow

S = "story-0049-0013"
RELPATH = "plans/epic-0049/execution-state.json"
KEYS = ["resumePoint", "tasksCompleted", "tasksPending", "lastCommitSha", "staleWarnings"]
DONE_WORDS = ("done", "merged", "complete", "concluída", "concluida")
PENDING_WORDS = (
    "pending",
    "in_progress",
    "pr_created",
    "pr_approved",
    "pr_merged",
    "failed",
    "blocked",
    "unknown",
)
TABLE = frozenset(DONE_WORDS + PENDING_WORDS)
LOW, HIGH = 1_714_550_000, 1_714_560_000  # completion times and story mtimes share this window
# completedAt values that neither GNU date nor the converter reads: the task is skipped.
MALFORMED = (
    "",
    "not a date",
    "2024-13-01T00:00:00Z",
    "2024-02-30T10:00:00Z",
    "2024-05-01T24:00:00Z",
    "2024-05-01T10:60:00Z",
    "2024-05-01T10:00:00ZZ",
    "2024-05-01T10:00:00.Z",
)
ABSENT = object()


def normal(status: str) -> str:
    """A status as storyd matches it: trimmed, NFC, lower-cased (docs/formats.md). On the
    seed's domain (no surrounding whitespace, NFC text) this is the seed's `ascii_downcase`."""
    return unicodedata.normalize("NFC", status.strip()).lower()


def in_seed_domain(status: str) -> bool:
    """Where the seed's jq and storyd bucket a status alike: nothing to trim or compose."""
    return status == unicodedata.normalize("NFC", status.strip())


@dataclass(frozen=True)
class GenTask:
    """A generated task: what goes in the file, and what the envelope must make of it."""

    id: str
    status: object  # ABSENT, None or a string
    sha: object  # ABSENT, None or a string
    completed: object  # ABSENT, None or a string
    epoch: int | None  # the instant `completed` names, when it is well formed

    @property
    def done(self) -> bool:
        return isinstance(self.status, str) and normal(self.status) in DONE_WORDS

    @property
    def unknown(self) -> bool:
        return isinstance(self.status, str) and normal(self.status) not in TABLE

    def node(self) -> dict[str, object]:
        fields = {"status": self.status, "commitSha": self.sha, "completedAt": self.completed}
        return {k: v for k, v in fields.items() if v is not ABSENT}


def mixed_case(word: str, *, ascii_only: bool = False) -> st.SearchStrategy[str]:
    """The word with each letter upper- or lower-cased at random."""
    flips = st.lists(st.booleans(), min_size=len(word), max_size=len(word))

    def apply(bits: list[bool]) -> str:
        return "".join(
            c.upper() if b and (c.isascii() or not ascii_only) else c
            for c, b in zip(word, bits, strict=True)
        )

    return flips.map(apply)


def statuses(
    *, ascii_only: bool, unknown_text: st.SearchStrategy[str]
) -> st.SearchStrategy[object]:
    known = st.sampled_from(DONE_WORDS + PENDING_WORDS).flatmap(
        lambda w: mixed_case(w, ascii_only=ascii_only)
    )
    unknown = unknown_text.filter(lambda s: normal(s) not in TABLE)
    if ascii_only:  # the reference's domain: see in_seed_domain
        unknown = unknown.filter(in_seed_domain)
        return st.one_of(known, known, known, unknown, st.just(ABSENT), st.none())
    # How writers vary a known status: surrounding whitespace, decomposed accents.
    pad = st.sampled_from(["", " ", "  ", "\t", "\n", "\u00a0"])
    decompose = st.booleans()
    varied = st.tuples(pad, known, pad, decompose).map(
        lambda p: p[0] + (unicodedata.normalize("NFD", p[1]) if p[3] else p[1]) + p[2]
    )
    return st.one_of(known, known, varied, unknown, st.just(ABSENT), st.none())


@st.composite
def completions(draw: st.DrawFn) -> tuple[object, int | None]:
    """A completedAt value and its epoch (None when malformed or absent)."""
    kind = draw(st.sampled_from(["z", "offset", "fraction", "malformed", "absent", "null"]))
    if kind == "absent":
        return ABSENT, None
    if kind == "null":
        return None, None
    if kind == "malformed":
        return draw(st.sampled_from(MALFORMED)), None
    epoch = draw(st.integers(LOW, HIGH))
    if kind == "z":
        return _utc(epoch) + "Z", epoch
    if kind == "fraction":
        return _utc(epoch) + "." + draw(st.from_regex(r"\A[0-9]{1,6}\Z")) + "Z", epoch
    minutes = draw(st.sampled_from([-300, -210, 60, 120, 330, 840]))
    sign = "+" if minutes >= 0 else "-"
    hh, mm = divmod(abs(minutes), 60)
    zone = draw(st.sampled_from([f"{sign}{hh:02d}:{mm:02d}", f"{sign}{hh:02d}{mm:02d}"]))
    return _utc(epoch + minutes * 60) + zone, epoch


def _utc(epoch: int) -> str:
    t = gmtime(epoch)
    day = f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
    return f"{day}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"


@st.composite
def story_tasks(
    draw: st.DrawFn, *, for_reference: bool = False, max_tasks: int = 12
) -> list[GenTask]:
    """Tasks with unique ids, in file order."""
    if for_reference:
        # The bash reference passes ids through `read` and `jq --args`: no control
        # characters, and no leading dash (jq would take it for an option).
        id_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=8)
        id_text = id_text.filter(lambda s: not s.startswith("-"))
        unknown = st.text(st.sampled_from("abcxyzDNOEQ_ 019é"), max_size=8)
        sha_text = st.text(st.sampled_from("0123456789abcdef"), max_size=8)
    else:
        id_text = st.text(max_size=10)
        unknown = st.text(max_size=10)
        sha_text = st.text(max_size=10)
    ids = draw(st.lists(id_text, unique=True, max_size=max_tasks))
    tasks = []
    for task_id in ids:
        status = draw(statuses(ascii_only=for_reference, unknown_text=unknown))
        sha = draw(st.one_of(st.just(ABSENT), st.none(), sha_text))
        completed, epoch = draw(completions())
        tasks.append(GenTask(task_id, status, sha, completed, epoch))
    return tasks


@st.composite
def state_files(draw: st.DrawFn, *, for_reference: bool = False) -> tuple[bytes, list[GenTask]]:
    """A whole state file holding the story, maybe between sibling stories."""
    tasks = draw(story_tasks(for_reference=for_reference))
    stories: dict[str, object] = {}
    if draw(st.booleans()):
        stories["story-0049-0001"] = {
            "tasks": {t.id: t.node() for t in draw(story_tasks(max_tasks=3))}
        }
    stories[S] = {"tasks": {t.id: t.node() for t in tasks}} if tasks or draw(st.booleans()) else {}
    if draw(st.booleans()):
        stories["story-0049-0099"] = {"tasks": {"X": {"status": "DONE"}}}
    ascii_input = draw(st.booleans())
    body = {"epic": "0049", "stories": stories}
    return json.dumps(body, ensure_ascii=ascii_input).encode("utf-8"), tasks


mtimes = st.one_of(st.none(), st.integers(LOW - 5, HIGH + 5), st.floats(LOW, HIGH))


def expected_envelope(tasks: list[GenTask], mtime: float | None) -> dict[str, object]:
    """The seed's Steps 3-6, written out plainly from the generated facts."""
    done = [t for t in tasks if t.done]
    pending = [t for t in tasks if not t.done]
    if not done:
        point = "fresh-start"
    elif not pending:
        point = "all-done"
    else:
        point = f"phase-2-task-{next(i for i, t in enumerate(tasks, 1) if not t.done)}"
    whole = int(mtime) if mtime is not None else 0
    stale = [
        f"Story file modified after task {t.id} DONE"
        for t in done
        if whole and t.epoch is not None and t.epoch < whole
    ]
    last = done[-1].sha if done else None
    return {
        "resumePoint": point,
        "tasksCompleted": [
            {"id": t.id, "commitSha": t.sha if isinstance(t.sha, str) else None} for t in done
        ],
        "tasksPending": [t.id for t in pending],
        "lastCommitSha": last if isinstance(last, str) and last else None,
        "staleWarnings": stale,
    }


def lay_out(workspace: Path, data: bytes, mtime: float | None) -> None:
    folder = workspace / "plans" / "epic-0049"
    folder.mkdir(parents=True)
    (folder / "execution-state.json").write_bytes(data)
    if mtime is not None:
        story = folder / f"{S}.md"
        story.write_text("# story\n", encoding="utf-8")
        os.utime(story, (mtime, mtime))


class TestEnvelopeInvariants:
    """In-process: the envelope obeys the seed's rules for any state file."""

    @settings(
        max_examples=300,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(generated=state_files(), mtime=mtimes)
    def test_rules(
        self, generated: tuple[bytes, list[GenTask]], mtime: float | None, tmp_path: Path
    ) -> None:
        data, tasks = generated
        with tempfile.TemporaryDirectory(dir=tmp_path) as root:
            workspace = Path(root)
            lay_out(workspace, data, mtime)
            units = {u.key: u for u in ADAPTER.parse(data, RELPATH)}
            result = answer(str(workspace), units[S], Options(staleness="mtime"))
        env = result.envelope
        ids = [t.id for t in tasks]
        completed = [c["id"] for c in env["tasksCompleted"]]  # type: ignore[attr-defined]
        pending = env["tasksPending"]

        # An order-preserving partition of the task ids.
        assert sorted(completed + pending, key=ids.index) == ids  # type: ignore[operator]
        assert completed == [i for i in ids if i in set(completed)]
        assert pending == [i for i in ids if i not in set(completed)]
        assert not set(completed) & set(pending)  # type: ignore[arg-type]

        # The resume point rule.
        point = env["resumePoint"]
        if not completed:
            assert point == "fresh-start"
        elif not pending:
            assert point == "all-done"
        else:
            index = int(str(point).removeprefix("phase-2-task-"))
            assert ids[index - 1] == pending[0]  # type: ignore[index]
            assert all(i in completed for i in ids[: index - 1])

        # lastCommitSha is the last DONE task's sha.
        if completed:
            assert env["lastCommitSha"] == (env["tasksCompleted"][-1]["commitSha"] or None)  # type: ignore[index]
        else:
            assert env["lastCommitSha"] is None

        # staleWarnings name DONE tasks only, in task order.
        named = [
            str(w).removeprefix("Story file modified after task ").removesuffix(" DONE")
            for w in env["staleWarnings"]
        ]  # type: ignore[attr-defined]
        assert named == [i for i in completed if i in set(named)]
        if mtime is None:
            assert named == []

        # One line, jq's bytes, the contract's key order.
        line = result.line
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        parsed = json.loads(line)
        assert list(parsed) == KEYS
        assert parsed == env

        # And exactly the seed's answer, with its warnings.
        assert env == expected_envelope(tasks, mtime)
        assert list(result.warnings) == [
            f"warn: unknown status '{t.status}' for task {t.id}; treated as PENDING"
            for t in tasks
            if t.unknown
        ]


def _reference_missing() -> str | None:
    missing = [
        tool for tool in ("jq", "flock", "bash", "date", "stat") if shutil.which(tool) is None
    ]
    return f"the reference needs {', '.join(missing)} on PATH" if missing else None


class TestReferenceParity:
    """As processes: `storyd resume --direct --staleness mtime` prints what the reference prints."""

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(generated=state_files(for_reference=True), mtime=mtimes)
    def test_byte_identical(
        self,
        generated: tuple[bytes, list[GenTask]],
        mtime: float | None,
        tmp_path: Path,
        isolated_env: dict[str, str],
    ) -> None:
        reason = _reference_missing()
        if reason:
            pytest.skip(reason)
        data, tasks = generated
        env = {**isolated_env, "TZ": "UTC", "LC_ALL": "C.UTF-8"}
        argv = ["--story-id", S.upper(), "--epic-id", "49"]
        with tempfile.TemporaryDirectory(dir=tmp_path) as root:
            workspace = Path(root)
            lay_out(workspace, data, mtime)
            ours = subprocess.run(
                [STORYD, "resume", *argv, "--direct", "--staleness", "mtime"],
                cwd=workspace,
                env=env,
                capture_output=True,
                timeout=30,
                check=False,
            )
            theirs = run_reference(argv, workspace, env)
        assert theirs.returncode == 0, theirs.stderr
        assert (ours.returncode, ours.stdout, ours.stderr) == (
            theirs.returncode,
            theirs.stdout,
            theirs.stderr,
        )
        assert json.loads(ours.stdout) == expected_envelope(tasks, mtime)
