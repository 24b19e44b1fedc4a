"""The planner's one error type: bad input or an impossible layout, with a message that says what to do."""

from __future__ import annotations


class PlanError(ValueError):
    """Raised for input the planner cannot turn into a layout; `str()` is meant for the user as is."""
