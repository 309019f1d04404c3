"""An example detector plugin: DONE tasks that record no commitSha (docs/detectors.md).

Register it in your own package's pyproject.toml:

    [project.entry-points."storyd.detectors"]
    todo = "todo_detector:DETECTOR"

and tune it in config.toml:

    [detectors.todo]
    severity = "info"
"""

from __future__ import annotations

from storyd.core.model import SEVERITIES, Finding, Unit
from storyd.detectors import Context

__all__ = ["DETECTOR", "TodoDetector"]


class TodoDetector:
    """Flags every DONE task without a commitSha."""

    name = "todo"

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        """One finding per DONE task with no commitSha; the severity is an option."""
        severity = context.options.get("severity", "warning")
        if severity not in SEVERITIES:
            severity = "warning"
        return [
            Finding(self.name, "no-commit", str(severity),
                    f"task {t.id} is DONE but records no commitSha", t.id)
            for t in unit.tasks
            if t.done and not t.commit_sha
        ]


DETECTOR = TodoDetector()
