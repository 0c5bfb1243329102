"""Line diffs in bounded time: difflib where it is safe, anchored on unique lines where it is not.

The environment diffs an agent's files against the originals after every change (the diff is shown,
logged and counted in the reward), and an agent may write any file up to 1 MiB. ``difflib``'s
matcher is quadratic in the lines it must compare: two 5,000-line files that differ on every other
line take seconds of CPU, 20,000 lines over a minute. So :func:`opcodes` diffs small inputs exactly as
``difflib`` does (every file of a generated app, by far, so their diffs do not change), and larger
ones by:

1. taking off the lines both files begin and end with;
2. handing what is left to ``difflib`` if it is small (:data:`DIFFLIB_MAX_PRODUCT`);
3. otherwise anchoring on the lines that occur exactly once in each side (the longest run of them
   in the same order, as patience diff does) and diffing each gap between anchors the same way;
4. a gap with no such line, or any gap once :data:`WORK_BUDGET` lines have been handled, is one
   replaced block.

Every step is linear or ``n log n`` in its lines, and the work is counted, not timed: the same two
files always give the same diff. :func:`unified_diff` writes the result in the format of
``difflib.unified_diff``.
"""

from __future__ import annotations

import bisect
import difflib
from collections import Counter
from typing import Iterator, Sequence

Opcode = tuple[str, int, int, int, int]

DIFFLIB_MAX_PRODUCT = 1_000_000
"""Inputs (or gaps) whose line counts multiply to at most this go to ``difflib``: about 0.15 s of CPU
at its worst (lines that alternate), a millisecond for a typical edit."""
WORK_BUDGET = 4_000_000
"""Lines the anchoring steps may handle per diff before the gaps left are replaced whole."""
MAX_DEPTH = 64
"""Gaps within gaps anchored before the innermost is replaced whole."""


def opcodes(a: Sequence[str], b: Sequence[str]) -> list[Opcode]:
    """``difflib.SequenceMatcher.get_opcodes()`` for lines ``a`` and ``b``, in bounded time."""
    if len(a) * len(b) <= DIFFLIB_MAX_PRODUCT:
        return difflib.SequenceMatcher(None, a, b).get_opcodes()
    work = [WORK_BUDGET]
    raw: list[Opcode] = []
    _diff(a, b, 0, len(a), 0, len(b), raw, work, 0)
    return _merged(raw)


def _diff(a: Sequence[str], b: Sequence[str], i1: int, i2: int, j1: int, j2: int, out: list[Opcode],
          work: list[int], depth: int) -> None:
    head = 0
    while i1 + head < i2 and j1 + head < j2 and a[i1 + head] == b[j1 + head]:
        head += 1
    tail = 0
    while i2 - tail > i1 + head and j2 - tail > j1 + head and a[i2 - 1 - tail] == b[j2 - 1 - tail]:
        tail += 1
    work[0] -= head + tail
    if head:
        out.append(("equal", i1, i1 + head, j1, j1 + head))
    _middle(a, b, i1 + head, i2 - tail, j1 + head, j2 - tail, out, work, depth)
    if tail:
        out.append(("equal", i2 - tail, i2, j2 - tail, j2))


def _middle(a: Sequence[str], b: Sequence[str], i1: int, i2: int, j1: int, j2: int, out: list[Opcode],
            work: list[int], depth: int) -> None:
    if i1 == i2 and j1 == j2:
        return
    if i1 == i2 or j1 == j2:
        out.append(("insert" if i1 == i2 else "delete", i1, i2, j1, j2))
        return
    if (i2 - i1) * (j2 - j1) <= DIFFLIB_MAX_PRODUCT:
        for tag, x1, x2, y1, y2 in difflib.SequenceMatcher(None, a[i1:i2], b[j1:j2]).get_opcodes():
            out.append((tag, i1 + x1, i1 + x2, j1 + y1, j1 + y2))
        return
    work[0] -= (i2 - i1) + (j2 - j1)
    anchors = _anchors(a, b, i1, i2, j1, j2) if work[0] > 0 and depth < MAX_DEPTH else []
    if not anchors:
        out.append(("replace", i1, i2, j1, j2))
        return
    x, y = i1, j1
    for ai, bj in anchors:
        _diff(a, b, x, ai, y, bj, out, work, depth + 1)
        out.append(("equal", ai, ai + 1, bj, bj + 1))
        x, y = ai + 1, bj + 1
    _diff(a, b, x, i2, y, j2, out, work, depth + 1)


def _anchors(a: Sequence[str], b: Sequence[str], i1: int, i2: int, j1: int, j2: int) -> list[tuple[int, int]]:
    """The longest run, in the same order on both sides, of lines that occur once in ``a[i1:i2]`` and
    once in ``b[j1:j2]``: (index in a, index in b) pairs."""
    in_a, in_b = Counter(a[i1:i2]), Counter(b[j1:j2])
    where_b = {b[j]: j for j in range(j1, j2) if in_b[b[j]] == 1 and in_a.get(b[j]) == 1}
    pairs = [(i, where_b[a[i]]) for i in range(i1, i2) if a[i] in where_b]
    if not pairs:
        return []
    # longest increasing run of b-indices (patience sorting), kept as back-links
    tops: list[int] = []
    top_at: list[int] = []
    back = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        pile = bisect.bisect_left(tops, j)
        if pile == len(tops):
            tops.append(j)
            top_at.append(k)
        else:
            tops[pile], top_at[pile] = j, k
        back[k] = top_at[pile - 1] if pile else -1
    chain, k = [], top_at[-1]
    while k != -1:
        chain.append(pairs[k])
        k = back[k]
    return chain[::-1]


def _merged(raw: list[Opcode]) -> list[Opcode]:
    """Adjacent opcodes of the same tag joined, as ``difflib`` would report them."""
    merged: list[Opcode] = []
    for op in raw:
        if op[1] == op[2] and op[3] == op[4]:
            continue
        if merged and merged[-1][0] == op[0] and merged[-1][2] == op[1] and merged[-1][4] == op[3]:
            tag, i1, _, j1, _ = merged[-1]
            merged[-1] = (tag, i1, op[2], j1, op[4])
        else:
            merged.append(op)
    if not merged:
        merged.append(("equal", 0, 0, 0, 0))
    return merged


def _grouped(codes: list[Opcode], n: int) -> Iterator[list[Opcode]]:
    """Hunks of ``codes`` with ``n`` lines of context (``SequenceMatcher.get_grouped_opcodes``)."""
    codes = list(codes)
    if not codes:
        return
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)
    gap = n + n
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > gap:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _range(start: int, stop: int) -> str:
    """A unified diff's ``start,length`` (as ``difflib`` writes it)."""
    beginning, length = start + 1, stop - start
    if length == 1:
        return str(beginning)
    if not length:
        beginning -= 1
    return f"{beginning},{length}"


def unified_diff(a: Sequence[str], b: Sequence[str], fromfile: str, tofile: str, n: int = 3) -> Iterator[str]:
    """``difflib.unified_diff(a, b, fromfile, tofile, n=n)``, with :func:`opcodes`."""
    started = False
    for group in _grouped(opcodes(a, b), n):
        if not started:
            started = True
            yield f"--- {fromfile}\n"
            yield f"+++ {tofile}\n"
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from ("-" + line for line in a[i1:i2])
            if tag in ("replace", "insert"):
                yield from ("+" + line for line in b[j1:j2])
