"""Fitting a sequence of text pieces into a character budget by dropping the middle.

Why: a long trajectory shown to a model (an expert demonstration, a pool entry) is most useful by its
opening (where to go) and its finish (what solved it); the middle is what can go. Both renderers use
this one rule."""

from __future__ import annotations

from collections.abc import Sequence


def keep_ends(pieces: Sequence[str], budget: int) -> tuple[list[str], list[str]]:
    """The leading and trailing pieces that fit in ``budget`` characters (each costs its length + 1 for
    a newline), taken alternately: first piece, last piece, second piece, ... The pieces between the two
    returned lists are the ones left out (``len(pieces) - len(front) - len(back)`` of them)."""
    front: list[str] = []
    back: list[str] = []
    used = 0
    lo, hi = 0, len(pieces) - 1
    while lo <= hi:
        take_front = len(front) <= len(back)
        piece = pieces[lo] if take_front else pieces[hi]
        if used + len(piece) + 1 > budget:
            break
        used += len(piece) + 1
        if take_front:
            front.append(piece)
            lo += 1
        else:
            back.insert(0, piece)
            hi -= 1
    return front, back
