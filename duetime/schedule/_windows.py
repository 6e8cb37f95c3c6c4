"""Run windows: spread a job's runs over "any time within W after the scheduled time".

``due_at = scheduled_for + stable_hash64(job_id) mod W`` (W in whole milliseconds), so the same
job always lands on the same point of its window, on every process and after every restart, and
many jobs sharing a cron expression spread out instead of firing in the same millisecond.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from duetime.schedule._instants import require_aware
from duetime.schedule._stable_hash import stable_hash64

__all__ = ["WINDOW_RESOLUTION", "due_at", "window_offset"]

# Offsets are whole milliseconds: a window shorter than this gives none (window_offset).
WINDOW_RESOLUTION = timedelta(milliseconds=1)


def window_offset(job_id: str, window: timedelta) -> timedelta:
    """Return the job's fixed offset inside ``window``: in [0, window), whole milliseconds.

    A window shorter than 1 ms (or zero, or negative) gives no offset.
    """
    milliseconds = window // WINDOW_RESOLUTION
    if milliseconds <= 0:
        return timedelta(0)
    return timedelta(milliseconds=stable_hash64(job_id) % milliseconds)


def due_at(
    job_id: str, scheduled_for: datetime, window: timedelta, next_occurrence: datetime | None
) -> datetime:
    """Return when the run for ``scheduled_for`` should be released.

    The window is first narrowed to the time until the next occurrence, so a run is always
    released strictly before the next one is scheduled, even when a DST shift or a short
    interval leaves less room than the window. Narrowing keeps runs spread instead of piling
    them up at the end.

    Args:
        job_id: The job's id; the only input to the offset.
        scheduled_for: The occurrence (aware).
        window: The job's window; zero means "exactly on time".
        next_occurrence: The job's next occurrence after ``scheduled_for``, or None.
    """
    require_aware(scheduled_for, "scheduled_for")
    if next_occurrence is not None:
        require_aware(next_occurrence, "next_occurrence")
        window = min(window, next_occurrence - scheduled_for)
    return scheduled_for + window_offset(job_id, window)
