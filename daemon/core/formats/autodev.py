"""The `autodev` format (seed 003, the autodev state pointer).

_docs/_autodev_state.md is a markdown pointer to the current step only: `flow`,
`step`, `name`, `status`, `sub_step {phase, name, detail}`, `retry_count`, `cycle`,
one `key: value` a line, or all on one line as the seed's own examples appear. One unit
per workspace, keyed `autodev`; its tasks are the active flow's steps, those before the
current one inferred completed (history lives in _docs/ and git, not in the pointer).
"""

from __future__ import annotations

import os

from storyd.core.errors import DataError
from storyd.core.formats.base import Adapter, Source, finding, make_task, normal_status
from storyd.core.formats.common import (
    ALL_DONE,
    as_int,
    one_line,
    progress,
    resume_point,
    text_of,
)
from storyd.core.jsonio import conflict_marker, utf16_without_bom
from storyd.core.model import DONE, PENDING, Finding, Task, Unit

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from storyd.core.formats.flowtable import FlowTable

__all__ = ["ADAPTER", "FLOW_STEPS", "AutodevAdapter", "parse_state"]

STATE_PATH = "_docs/_autodev_state.md"
DOCS = "_docs"
FLOW_STEPS = {"greenfield": 11, "existing-code": 17, "meta-repo": 6}
IMPLEMENT_STEP = 10  # existing-code's Implement step writes implementation_report_*_cycle<N>.md
MAX_RETRIES = 3
AWAITING = "awaiting-invocation"
_KEYS = ("retry_count", "sub_step", "status", "detail", "phase", "cycle", "flow", "step", "name")
_SUB_KEYS = frozenset(("phase", "detail"))
_TOP_ONLY = frozenset(("flow", "step", "status", "retry_count", "cycle"))
_DONE = frozenset(("completed", "skipped"))
_PENDING = frozenset(("not_started", "in_progress", "failed"))
_KEBAB = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_QUOTES = "\"'`"
_EMPHASIS = "*`"
_LONGEST = max(len(k) for k in _KEYS)
_DASHES = "-:\u2013\u2014"  # `step: 3 - Plan`, `3: Plan`, en and em dashes


def _closing(line: str, start: int) -> int | None:
    """The index of the quote closing the one at `start` (backslash escapes skipped)."""
    quote = line[start]
    i = start + 1
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] == quote:
            return i
        i += 1
    return None


def _unquote(value: str) -> str:
    value = value.strip().rstrip(",").strip()
    if len(value) >= 2 and value[0] in _QUOTES and value[-1] == value[0]:
        return value[1:-1].replace("\\" + value[0], value[0])
    return value


def _skip(line: str, i: int, chars: str) -> int:
    while i < len(line) and line[i] in chars:
        i += 1
    return i


def _key_at(line: str, i: int) -> tuple[str, int] | None:
    """The key starting at `i` and the index after its colon, if one starts there.

    Keys match case-insensitively and may be emphasised as writers do in markdown:
    `flow:`, `Flow:`, `**flow**:`, `**Flow:**`, `` `flow`: ``.
    """
    if i and not (line[i - 1].isspace() or line[i - 1] in "{,"):
        return None
    j = _skip(line, i, _EMPHASIS)
    head = line[j : j + _LONGEST].lower()
    for key in _KEYS:
        if head.startswith(key):
            k = _skip(line, j + len(key), _EMPHASIS + " \t")
            if k < len(line) and line[k] == ":":
                k = _skip(line, k + 1, _EMPHASIS)
                if k == len(line) or line[k] in " \t":
                    return key, k
    return None


_ONE_TOKEN = frozenset(("flow", "status", "retry_count", "cycle", "phase"))
"""Fields whose value is one word: an unknown `word: ` after it starts a field of its own
(`cycle: 1 tracker: jira` is cycle 1 plus `tracker`), rather than running into it."""


def _other_key_at(line: str, i: int) -> tuple[str, int] | None:
    """An unknown `identifier: ` (a writer's own field) starting at `i`, after whitespace."""
    if not i or not line[i - 1].isspace() or not (line[i].isalpha() or line[i] == "_"):
        return None
    j = i
    while j < len(line) and (line[j].isalnum() or line[j] in "_-"):
        j += 1
    if j < len(line) and line[j] == ":" and (j + 1 == len(line) or line[j + 1] in " \t"):
        return "+" + line[i:j], j + 1
    return None


def _pairs(line: str) -> list[tuple[str, str, bool]]:
    """(key, raw value, first on its line) for every `key: value` in one line.

    A value runs to the next key or the end of the line; a quoted value or a `{...}`
    mapping runs to its closing character. Text before the first key is ignored.
    """
    pairs: list[tuple[str, str, bool]] = []
    key: str | None = None
    start = 0
    i = 0
    while i < len(line):
        found = _key_at(line, i)
        if found is None and (key in _ONE_TOKEN or (key or "").startswith("+")):
            found = _other_key_at(line, i)
        if found is None:
            i += 1
            continue
        if key is not None:
            pairs.append((key, line[start:i], len(pairs) == 0))
        key, i = found
        while i < len(line) and line[i] in " \t":
            i += 1
        start = i
        close = None
        if i < len(line) and line[i] in _QUOTES:
            close = _closing(line, i)
        elif i < len(line) and line[i] == "{":
            close = line.find("}", i)
            close = None if close < 0 else close
        if close is not None:
            pairs.append((key, line[start : close + 1], len(pairs) == 0))
            key = None
            i = close + 1
    if key is not None:
        pairs.append((key, line[start:], len(pairs) == 0))
    return pairs


def parse_state(text: str) -> tuple[dict[str, str], dict[str, str] | None, str | None]:
    """The top-level fields, the sub_step fields (None when absent) and a raw scalar
    sub_step value when one was written instead of the structured form."""
    top: dict[str, str] = {}
    sub: dict[str, str] | None = None
    scalar: str | None = None
    in_sub = False
    block_indent: int | None = None
    for raw_line in text.replace("```", " ").splitlines():
        stripped = raw_line.lstrip()
        indent = len(raw_line) - len(stripped)
        for key, raw, first in _pairs(raw_line):
            value = _unquote(raw)
            if key == "sub_step":
                sub = {}
                in_sub, block_indent, scalar = not value, None, None
                if value.startswith("{") and value.endswith("}"):
                    sub.update((k, _unquote(v)) for k, v, _ in _pairs(value[1:-1]))
                elif value:
                    scalar = value
                continue
            if in_sub and first and block_indent is None:
                block_indent = indent
            if key == "name" and in_sub and sub is not None:
                dedented = first and block_indent is not None and indent < block_indent
                in_sub = not dedented and "name" not in sub
            if key.startswith("+"):
                top.setdefault(key, value)  # a field of the writer's own, kept as written
                continue
            if key in _SUB_KEYS or (key == "name" and in_sub):
                sub = {} if sub is None else sub
                sub[key] = value
            else:
                top[key] = value
                in_sub = in_sub and key not in _TOP_ONLY
    return top, sub, scalar


def _step_number(text: str) -> tuple[int | None, str]:
    """The step number and the label some writers put after it: `3`, `3 (Plan)`,
    `3 - Plan`, `3: Plan` give 3 (and `Plan`); anything else gives None."""
    text = text.strip()
    digits = len(text) - len(text.lstrip("0123456789"))
    if not digits:
        return None, ""
    rest = text[digits:].strip()
    if rest and not (rest[0] in _DASHES or rest[0] == "(" or text[digits].isspace()):
        return None, ""  # `3a`, `4.5`: not a step number
    if rest.startswith("(") and rest.endswith(")"):
        return int(text[:digits]), rest[1:-1].strip()
    if rest and rest[0] in _DASHES:
        return int(text[:digits]), rest[1:].strip()
    return int(text[:digits]), ""


def _status(value: str | None) -> str | None:
    """A status as the seed spells it when a writer spaced or hyphenated it
    (`In Progress`, `not-started`); anything else as written."""
    if value is None:
        return None
    lowered = normal_status(value).lower()
    if lowered in _DONE or lowered in _PENDING:
        return value  # make_task trims and normalises it
    spelled = lowered.replace(" ", "_").replace("-", "_")
    return spelled if spelled in _DONE or spelled in _PENDING else value


def _kebab(name: str) -> bool:
    return (
        bool(name)
        and set(name) <= _KEBAB
        and not name.startswith("-")
        and not name.endswith("-")
        and "--" not in name
    )


def _sub_step(
    sub: dict[str, str] | None, scalar: str | None
) -> tuple[dict[str, object] | None, str]:
    """The parsed sub_step, or None and why it does not parse."""
    if scalar is not None:
        return None, f"sub_step is {scalar!r}, not the structured phase/name/detail form"
    if sub is None:
        return None, "there is no sub_step"
    phase_text = sub.get("phase")
    name = sub.get("name", "")
    phase = None if phase_text is None else as_int(phase_text)
    if phase is None:
        why = "has no phase" if phase_text is None else f"phase {phase_text!r} is not an integer"
        return None, f"sub_step {why}"
    if not _kebab(name):
        why = "has no name" if not name else f"name {name!r} is not kebab-case"
        return None, f"sub_step {why}"
    if name == AWAITING and phase != 0:
        return None, f"sub_step name {AWAITING} goes with phase 0, not {phase}"
    return {"phase": phase, "name": name, "detail": sub.get("detail", "")}, ""


def _docs_files(source: Source) -> list[str]:
    """Every file under _docs/ except the state file, workspace-relative."""
    files: list[str] = []
    top = source.path(DOCS)
    for folder, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = os.path.relpath(folder, source.workspace).replace(os.sep, "/")
        files.extend(f"{rel}/{n}" for n in sorted(names) if not n.startswith("."))
    return [f for f in files if f != STATE_PATH]


def _referenced(detail: str) -> list[str]:
    """The `_docs/...` paths a sub_step detail mentions."""
    paths = []
    for word in detail.split():
        path = word.strip("\"'`()[]<>,;:").rstrip(".")
        if path.startswith(f"{DOCS}/") and len(path) > len(DOCS) + 1:
            paths.append(path)
    return paths


def _unreadable(data: bytes, text: str) -> None:
    """Raise the DataError that says why the pointer cannot be read (failure path only)."""
    encoding = utf16_without_bom(data)
    marker = conflict_marker(text) if "<<<<<<<" in text else None
    if encoding is not None:
        why = f"{encoding} text without a byte-order mark (save it as UTF-8, or with a BOM)"
    elif marker is not None:
        line = text.count("\n", 0, marker) + 1
        why = f"git merge-conflict marker {text[marker : marker + 7]!r} (an unresolved merge) "
        why += f"at line {line} column 1"
    else:
        why = "no autodev state found (expected flow:, step:, status:, sub_step:)"
    msg = f"{STATE_PATH}: {why}"
    raise DataError(msg)


class _State:
    """The pointer's fields, validated; findings collect what does not hold."""

    def __init__(self, data: bytes) -> None:
        self.findings: list[Finding] = []
        text = text_of(data)
        if "<<<<<<<" in text:
            _unreadable(data, text)
        top, sub, scalar = parse_state(text)
        if not top and sub is None:
            _unreadable(data, text)
        self.flow = top.get("flow", "").strip().lower()
        self.steps = FLOW_STEPS.get(self.flow)
        self.step, label = _step_number(top.get("step", ""))
        self.step_text = top.get("step", "") if self.step is None else str(self.step)
        self.step_token = (top.get("step", "").split() or [""])[0].rstrip(":")
        self.implement = IMPLEMENT_STEP
        self.done = self.step_text.strip().lower() == "done"
        self.name = top.get("name", "") or label
        self.status = _status(top.get("status"))
        self.sub, why = _sub_step(sub, scalar)
        self.retry_count = self._count(top, "retry_count", 0, 0)
        self.cycle = self._count(top, "cycle", 1, 1)
        self.extra = {k[1:]: v for k, v in top.items() if k.startswith("+")}
        for field, value in self.extra.items():
            message = f"field {field}: {value!r} is not in the seed's template; kept, not read"
            self.findings.append(finding("extra-field", "info", message))
        if self.sub is None:
            message = f"{why}; resume falls back to the folder scan"
            self.findings.append(finding("unparsable-sub-step", "warning", message, self.task_id))
        if not self.flow:
            self.findings.append(finding("missing-field", "warning", "no flow: field"))
        elif self.steps is None:
            message = f"unknown flow {self.flow!r}; expected one of {', '.join(FLOW_STEPS)}"
            self.findings.append(finding("unknown-flow", "warning", message))
        if self.status is None:
            message = "no status: field; read as not_started"
            self.findings.append(finding("missing-field", "warning", message, self.task_id))

    @property
    def task_id(self) -> str | None:
        return None if self.step is None else f"step-{self.step}"

    def _count(self, top: dict[str, str], field: str, default: int, low: int) -> int:
        text = top.get(field)
        value = None if text is None else as_int(text)
        if text is not None and (value is None or value < low):
            message = f"{field} {text!r} is not an integer of at least {low}; read as {default}"
            self.findings.append(finding("invalid-field", "warning", message))
        return default if value is None or value < low else value


class AutodevAdapter(Adapter):
    """_docs/_autodev_state.md, one unit per workspace."""

    name = "autodev"
    convention = "autodev state pointer, _docs/_autodev_state.md"
    roots = (DOCS,)
    codes = (  # every finding code it raises (docs/formats.md)
        "docs-disagree", "extra-field", "flow-table", "flow-table-mismatch", "invalid-field",
        "missing-cycle-report", "missing-field", "missing-referenced-file", "needs-human",
        "retry-limit", "step-failed", "step-out-of-range", "unexpected-cycle", "unknown-flow",
        "unknown-status", "unparsable-sub-step"
    )

    def matches(self, relpath: str) -> bool:
        return relpath == STATE_PATH

    def owner(self, relpath: str) -> str | None:
        # Any _docs/ file: the cross-check reads the folder's contents.
        return STATE_PATH if relpath.startswith(f"{DOCS}/") else None

    def load(self, source: Source, relpath: str) -> list[Unit]:
        from storyd.core.formats.flowtable import find_flow_table, producer_table

        state = _State(source.read(relpath))
        table = find_flow_table(source, state.flow)
        if table is not None and (state.done or state.step_token in table.steps):
            return [self._by_table(source, relpath, state, table)]
        known = (
            None
            if table is not None or state.done
            else (producer_table(state.flow, state.step_token, state.name))
        )
        if known is not None:
            return [self._by_table(source, relpath, state, known)]
        labels = {
            "flow": state.flow,
            "step": state.step_text,
            "name": state.name,
            "status": state.status or "",
            "cycle": str(state.cycle),
            "retry_count": str(state.retry_count),
        }
        if state.sub is not None:
            labels["sub_step"] = f"{state.sub['phase']}:{state.sub['name']}"
        labels.update(state.extra)
        if not state.done and (state.step is None or state.step < 1):
            error = f"{relpath}: step {state.step_text!r} is neither a step number nor done"
            return [Unit("autodev", relpath, "autodev", (), labels=labels, error=error)]
        tasks = self._tasks(state)
        findings = state.findings
        findings.extend(self._rules(state))
        findings.extend(self._cross_check(source, state))
        labels["progress"] = progress(tasks)
        if state.steps is not None:
            labels["flow_table"] = f"seed 003 ({state.steps} steps)"
        if table is not None:
            message = (
                f"{table.path} lists steps {', '.join(table.steps)}, without step "
                f"{state.step_token}; progress is counted on the seed's {state.flow} steps"
            )
            findings.append(finding("flow-table-mismatch", "warning", message))
        return [
            Unit(
                "autodev",
                relpath,
                "autodev",
                tuple(tasks),
                resume_point=self._resume_point(state, tasks),
                findings=tuple(findings),
                labels=labels,
            )
        ]

    def _by_table(self, source: Source, relpath: str, state: _State, table: FlowTable) -> Unit:
        """The unit when the workspace carries the flow's Step Reference Table: its steps
        (a `16.5` included) are the tasks, and a flow-table info finding says so."""
        steps, names = table.steps, table.names
        current = len(steps) if state.done else steps.index(state.step_token)
        name = None if state.done else state.name or names[current]
        tasks = _step_tasks(state, steps, current, name)
        state.steps = len(steps)
        state.step = current + 1  # the position, for the rules and the cross-check
        implement = [i for i, n in enumerate(names) if n.strip().lower() == "implement"]
        if implement:
            state.implement = implement[0] + 1
        findings = state.findings
        findings.extend(self._rules(state))
        findings.extend(self._cross_check(source, state))
        message = (
            f"progress counted on {table.origin} ({len(steps)} steps: "
            f"{steps[0]}..{steps[-1]}), not the seed's {FLOW_STEPS.get(state.flow, '?')}"
        )
        findings.append(finding("flow-table", "info", message))
        labels = {
            "flow": state.flow,
            "step": state.step_token if not state.done else "done",
            "name": state.name or ("" if state.done else names[current]),
            "status": state.status or "",
            "cycle": str(state.cycle),
            "retry_count": str(state.retry_count),
            "flow_table": f"{table.path} ({len(steps)} steps)",
            **state.extra,
        }
        if state.sub is not None:
            labels["sub_step"] = f"{state.sub['phase']}:{state.sub['name']}"
        labels["progress"] = progress(tasks)
        if state.done:
            point = ALL_DONE
        else:
            finished = tasks[current].bucket == DONE
            if finished and current + 1 == len(steps):
                point = ALL_DONE
            else:
                label = steps[current + 1] if finished else steps[current]
                point = f"{state.flow}/step-{label}"
                if not finished and state.sub is not None:
                    point += f":{state.sub['name']}"
                status = (state.status or "not_started").lower()
                phase = state.sub["phase"] if state.sub is not None else 0
                started = current > 0 or status != "not_started" or phase != 0
                point = resume_point(tasks, point, started=started)
        return Unit(
            "autodev",
            relpath,
            "autodev",
            tuple(tasks),
            resume_point=point,
            findings=tuple(findings),
            labels=labels,
        )

    @staticmethod
    def _tasks(state: _State) -> list[Task]:
        if state.done:
            steps = [str(n) for n in range(1, (state.steps or 0) + 1)]
            return _step_tasks(state, steps, len(steps), None)
        current = state.step or 1
        steps = [str(n) for n in range(1, max(current, state.steps or 0) + 1)]
        return _step_tasks(state, steps, current - 1, state.name)

    @staticmethod
    def _resume_point(state: _State, tasks: list[Task]) -> str:
        """`<flow>/step-<N>:<sub_step name>`; the next step once the current one is finished."""
        if state.done:
            return ALL_DONE
        current = state.step or 1
        finished = tasks[current - 1].bucket == DONE
        number = current + 1 if finished else current
        prefix = f"{state.flow}/" if state.flow else ""
        pointer = f"{prefix}step-{number}"
        if not finished and state.sub is not None:
            pointer += f":{state.sub['name']}"
        status = (state.status or "not_started").lower()
        phase = state.sub["phase"] if state.sub is not None else 0
        started = current > 1 or status != "not_started" or phase != 0
        return resume_point(tasks, pointer, started=started)

    @staticmethod
    def _rules(state: _State) -> list[Finding]:
        """The seed's State File Rules 6 and 7, and the flow's step range and cycle."""
        findings = []
        task = state.task_id
        status = (state.status or "").lower()
        step = f"step {state.step_text}" + (f" ({state.name})" if state.name else "")
        if status == "failed" and state.retry_count >= MAX_RETRIES:
            message = (
                f"{step} failed after {state.retry_count} retries: do not auto-retry; "
                f"present the issue to the user"
            )
            findings.append(finding("needs-human", "error", message, task))
        elif status == "failed":
            message = f"{step} failed (retry {state.retry_count} of {MAX_RETRIES})"
            findings.append(finding("step-failed", "info", message, task))
        elif state.retry_count >= MAX_RETRIES:
            message = (
                f"retry_count is {state.retry_count} but status is {status or 'absent'}; "
                f"the seed sets failed when retries reach {MAX_RETRIES}"
            )
            findings.append(finding("retry-limit", "warning", message, task))
        if state.steps is not None and state.step is not None and state.step > state.steps:
            message = f"step {state.step} is beyond the {state.flow} flow's {state.steps} steps"
            findings.append(finding("step-out-of-range", "warning", message, task))
        if state.flow in ("greenfield", "meta-repo") and state.cycle != 1:
            message = f"cycle is {state.cycle}; the {state.flow} flow always has cycle 1"
            findings.append(finding("unexpected-cycle", "info", message))
        return findings

    @staticmethod
    def _cross_check(source: Source, state: _State) -> list[Finding]:
        """State File Rule 4, where the seed alone says what _docs/ must hold."""
        files = _docs_files(source)
        findings = []
        if not files and (state.done or (state.step or 0) > 1):
            message = (
                f"the state is at step {state.step_text} but _docs/ holds nothing besides "
                f"_autodev_state.md; the seed trusts the folder scan"
            )
            findings.append(finding("docs-disagree", "warning", message))
        if state.flow == "existing-code":
            last = state.cycle if (state.step or 0) > state.implement else state.cycle - 1
            names = [f.rsplit("/", 1)[-1] for f in files]
            for cycle in range(1, last + 1):
                suffix = f"_cycle{cycle}.md"
                if not any(
                    n.startswith("implementation_report_") and n.endswith(suffix) for n in names
                ):
                    message = (
                        f"no _docs/ file implementation_report_*{suffix} for cycle {cycle}, "
                        f"but the state is at cycle {state.cycle}, step {state.step_text}"
                    )
                    findings.append(finding("missing-cycle-report", "warning", message))
        if state.sub is not None:
            detail = str(state.sub["detail"])
            findings.extend(
                finding(
                    "missing-referenced-file",
                    "warning",
                    f"sub_step detail {one_line(detail, 120)!r} names {path}, which does not exist",
                    state.task_id,
                )
                for path in _referenced(detail)
                if not source.exists(path)
            )
        return findings


ADAPTER = AutodevAdapter()


def _step_tasks(state: _State, steps: list[str], current: int, name: str | None) -> list[Task]:
    """A flow's steps as tasks: those before `current` completed, the current one as the
    state file says (named `name`), the rest not started; the inferred ones say so. With
    `current` past the last step, every step is completed."""
    tasks = [
        Task(f"step-{s}", "completed", DONE, extra={"inferred": True}) for s in steps[:current]
    ]
    if current >= len(steps):
        return tasks
    task, unknown = make_task(
        f"step-{steps[current]}",
        state.status,
        done=_DONE,
        pending=_PENDING,
        default="not_started",
        extra={
            "name": name,
            "sub_step": state.sub,
            "retry_count": state.retry_count,
            "cycle": state.cycle,
        },
    )
    if unknown is not None:
        state.findings.append(unknown)
    tasks.append(task)
    tasks.extend(
        Task(f"step-{s}", "not_started", PENDING, extra={"inferred": True})
        for s in steps[current + 1 :]
    )
    return tasks
