"""What every dashboard form shares: the error that refuses one."""

from __future__ import annotations


class FormError(ValueError):
    """The form was refused; the message says what to change."""
