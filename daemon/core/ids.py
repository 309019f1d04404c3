"""Validation of the ids that become path components: nothing may escape a workspace."""

from __future__ import annotations

from storyd.core.errors import UsageError

__all__ = ["normalize_epic_id", "normalize_story_id"]

_DIGITS = frozenset("0123456789")
_STORY_SHAPE = "story-XXXX-YYYY"


def normalize_story_id(value: str) -> str:
    """Lower-case a story id and check it against ^story-[0-9]{4}-[0-9]{3,4}$.

    The seed asks for four digits after the epic; its producer also wrote three
    (`story-0018-001`, epic 0018's stories), and those are accepted too.
    """
    story = value.lower()
    if (
        len(story) in (len(_STORY_SHAPE), len(_STORY_SHAPE) - 1)
        and story.startswith("story-")
        and story[10] == "-"
        and set(story[6:10]) <= _DIGITS
        and set(story[11:]) <= _DIGITS
    ):
        return story
    msg = f"invalid --story-id {value!r}: expected {_STORY_SHAPE} (digits; YYY also accepted)"
    raise UsageError(msg)


def normalize_epic_id(value: str) -> str:
    """Check that an epic id is digits and zero-pad it to 4."""
    if value and len(value) <= 9 and set(value) <= _DIGITS:
        return value.zfill(4)
    msg = f"invalid --epic-id {value!r}: expected digits, such as 0049"
    raise UsageError(msg)
