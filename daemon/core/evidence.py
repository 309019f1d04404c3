"""Evidence as people read it: the declared kinds of a finding's (and a repair's)
evidence, and the one function every door renders a piece of evidence through.

A finding's `evidence` is a flat mapping of strings (storyd.core.model.Finding); a
reconcile plan's evidence (storyd.api.reconcile.evidence) is richer: a commit's subject
and patch id, a journal line, an output file's status. Both are one of these kinds,
told apart by the keys they hold; the first kind whose keys are all there renders it:

    rewritten commit   rewrittenFrom {commit, patchId}   reconcile: the old commit
    history version    history, at                       reconcile: the version restored
    landed commit      landed, commit                    squash-merged: where it landed
    replaced commit    replacement, commit               unreachable: the rewrite's result
    commit             commit                            (+ subject, patchId, committedAt,
                                                         tip, startedAt)
    journal line       journal, line, text               reconcile: the journal's entry
    journal            journal                           state-not-updated (journalStatus)
    output file        output                            (+ status, written, completedAt)
    backup             backup                            (+ stateFile, bytes)
    lost version       why, seen                         regressed (status, sha, unit, ...)
    file lines         lines                             torn-line
    other file         other                             task-files-disagree (tasks)
    tasks              count, tasks                      one cause, many tasks (collapsed)

A key a kind does not name is shown after it (`key value`); a piece that fits no kind,
or whose values are not what its kind needs, is shown as its `key value` pairs. Nothing
here raises on any mapping: a door never dies on evidence it did not expect.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["KINDS", "Kind", "evidence_lines", "evidence_text", "kind_of"]

SHOWN_IDS = 10  # ids listed in a `tasks` piece; the rest are counted
LONGEST = 240  # characters of one value shown


class Kind:
    """One declared kind of evidence: its name, the keys it needs, the keys it shows
    (the needed ones too) and how it reads."""

    __slots__ = ("name", "needs", "render", "shows")

    def __init__(self, name: str, needs: tuple[str, ...], shows: tuple[str, ...],
                 render: Callable[[Mapping[str, object]], str]) -> None:  # fmt: skip
        self.name = name
        self.needs = needs
        self.shows = frozenset(needs + shows)
        self.render = render

    def fits(self, item: Mapping[str, object]) -> bool:
        """Whether `item` holds every key this kind needs, each a non-empty scalar (or,
        for `rewrittenFrom`, a commit)."""
        return all(_usable(item.get(key)) for key in self.needs)

    def __repr__(self) -> str:
        return f"Kind({self.name!r})"


def _usable(value: object) -> bool:
    if isinstance(value, dict):
        return _usable(value.get("commit"))
    return value is not None and value != "" and not isinstance(value, list | tuple)


def _text(value: object) -> str:
    """A value in one line, at most LONGEST characters."""
    text = value if isinstance(value, str) else repr(value) if value is None else str(value)
    text = " ".join(text.split()) if "\n" in text or "\r" in text else text
    return text if len(text) <= LONGEST else text[: LONGEST - 1] + "…"


def _parts(item: Mapping[str, object], *parts: tuple[str, str]) -> str:
    """`template` for each (key, template) whose key has a value, joined by spaces."""
    return " ".join(
        template.format(_text(item[key])) for key, template in parts if _usable(item.get(key))
    )


def _commit(item: Mapping[str, object]) -> str:
    return _parts(item, ("commit", "commit {}"), ("subject", '"{}"'), ("patchId", "patch-id {}"),
                  ("committedAt", "committed {}"), ("tip", "on {}"),
                  ("startedAt", "(the task started {})"))  # fmt: skip


def _rewritten(item: Mapping[str, object]) -> str:
    old = item["rewrittenFrom"]
    assert isinstance(old, dict)  # fits(): a dict with a commit
    patch = f" (patch-id {_text(old['patchId'])})" if _usable(old.get("patchId")) else ""
    return f"rewritten from commit {_text(old['commit'])}{patch}"


def _history(item: Mapping[str, object]) -> str:
    head = f"{_text(item['history'])} {_text(item['at'])}"
    rest = _parts(item, ("had status", "had status {}"), ("sha", "at {}"),
                  ("completedAt", "completed {}"))  # fmt: skip
    return f"{head}: {rest}" if rest else head


def _landed(item: Mapping[str, object]) -> str:
    how = _parts(item, ("why", "{}"), ("named", "(names {})"))
    tip = f" on {_text(item['tip'])}" if _usable(item.get("tip")) else ""
    head = f"commit {_text(item['commit'])} landed{tip} as {_text(item['landed'])}"
    return f"{head}: {how}" if how else head


def _replaced(item: Mapping[str, object]) -> str:
    tip = f" on {_text(item['tip'])}" if _usable(item.get("tip")) else ""
    return f"commit {_text(item['commit'])} rewritten as {_text(item['replacement'])}{tip}"


def _journal_line(item: Mapping[str, object]) -> str:
    return f"{_text(item['journal'])}:{_text(item['line'])}: {_text(item['text'])}"


def _journal(item: Mapping[str, object]) -> str:
    says = item.get("journalStatus")
    tail = f" records the task {_text(says)}" if _usable(says) else ""
    return f"journal {_text(item['journal'])}{tail}"


def _output(item: Mapping[str, object]) -> str:
    status = item.get("status")
    shown = f"status {_text(status)!r}" if _usable(status) else ""
    rest = _parts(item, ("written", "written {}"), ("completedAt", "completed {}"))
    return " ".join(p for p in (f"output {_text(item['output'])}", shown, rest) if p)


def _backup(item: Mapping[str, object]) -> str:
    return _parts(item, ("backup", "backup {}"), ("stateFile", "of {}"), ("bytes", "({} bytes)"))


def _lost(item: Mapping[str, object]) -> str:
    if item.get("why") == "unit-removed":
        tasks = item.get("tasks")
        many = f" with {_text(tasks)} finished task(s)" if _usable(tasks) else ""
        unit = _text(item["unit"]) if _usable(item.get("unit")) else "the unit"
        return f"{unit}{many} in a version seen {_text(item['seen'])}, gone since"
    had = _parts(item, ("status", "status {}"), ("sha", "at {}"), ("completedAt", "completed {}"))
    return f"a version seen {_text(item['seen'])} had {had or 'it'} ({_text(item['why'])})"


def _ids(value: object, count: object = None) -> str:
    ids = [i for i in str(value).split(",") if i]
    shown = ", ".join(ids[:SHOWN_IDS])
    total = int(count) if isinstance(count, str) and count.isdigit() else len(ids)
    more = total - min(len(ids), SHOWN_IDS)
    return shown + (f" and {more} more" if more > 0 else "")


def _lines(item: Mapping[str, object]) -> str:
    return f"lines {_ids(item['lines'])}"


def _other(item: Mapping[str, object]) -> str:
    tasks = f" on tasks {_ids(item['tasks'])}" if _usable(item.get("tasks")) else ""
    return f"the other file {_text(item['other'])} differs{tasks}"


def _tasks(item: Mapping[str, object]) -> str:
    return f"{_text(item['count'])} tasks: {_ids(item['tasks'], item['count'])}"


TASKS = Kind("tasks", ("count", "tasks"), (), _tasks)
KINDS: tuple[Kind, ...] = (
    Kind("rewritten commit", ("rewrittenFrom",), (), _rewritten),
    Kind("history version", ("history", "at"), ("had status", "sha", "completedAt"), _history),
    Kind("landed commit", ("landed", "commit"), ("tip", "why", "named"), _landed),
    Kind("replaced commit", ("replacement", "commit"), ("tip",), _replaced),
    Kind("commit", ("commit",), ("subject", "patchId", "committedAt", "tip", "startedAt"),
         _commit),
    Kind("journal line", ("journal", "line", "text"), ("end",), _journal_line),
    Kind("journal", ("journal",), ("journalStatus",), _journal),
    Kind("output file", ("output",), ("status", "written", "completedAt"), _output),
    Kind("backup", ("backup",), ("stateFile", "bytes"), _backup),
    Kind("lost version", ("why", "seen"), ("status", "sha", "completedAt", "unit", "tasks"),
         _lost),
    Kind("file lines", ("lines",), (), _lines),
    Kind("other file", ("other",), ("tasks",), _other),
    TASKS,
)
"""Every declared kind, most specific first (the first that fits renders). `tasks` is
also shown after another kind (a collapsed finding keeps its cause's evidence)."""


def kind_of(item: Mapping[str, object]) -> Kind | None:
    """The declared kind `item` is, or None (it renders generically)."""
    return next((k for k in KINDS if k.fits(item)), None)


def _generic(item: Mapping[str, object], keys: object = None) -> str:
    """`key value, key value` for every key (or those in `keys`)."""
    return ", ".join(
        f"{_text(k)} {_text(v) if v != '' else repr(v)}"
        for k, v in item.items()
        if keys is None or k in keys  # type: ignore[operator]
    )


def evidence_text(item: object) -> str:
    """One piece of evidence in one line, through its kind; generic when it fits none.
    Never raises."""
    if not isinstance(item, dict):
        return _text(item)
    kind = kind_of(item)
    if kind is None:
        return _generic(item)
    try:
        shown = kind.render(item)
    except Exception:  # a value of a shape its kind does not expect: said plainly
        return _generic(item)
    extra = [k for k in item if k not in kind.shows]
    if TASKS.fits(item) and kind is not TASKS and {"count", "tasks"} <= set(extra):
        shown += "; " + TASKS.render(item)  # one cause of many tasks (storyd.core.causes)
        extra = [k for k in extra if k not in ("count", "tasks")]
    return f"{shown}; {_generic(item, extra)}" if extra else shown


def evidence_lines(finding: Mapping[str, object]) -> list[str]:
    """A finding's (wire form) evidence, one line per piece: a mapping is one piece, a
    list one per item; nothing for none."""
    found = finding.get("evidence")
    if isinstance(found, list | tuple):
        return [evidence_text(e) for e in found if e not in (None, {}, "")]
    if isinstance(found, dict) and found:
        return [evidence_text(found)]
    return [] if found in (None, {}, "") else [evidence_text(found)]
