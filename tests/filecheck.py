"""A tiny FileCheck for the IR tier: check text written next to the kernel in the test.

Directives (one per line, anywhere on the line, after an optional comment leader such as ``//`` or ``#``)::

    CHECK: pattern          the pattern occurs after the previous match
    CHECK-NEXT: pattern     ... on the line right after the previous match's line
    CHECK-SAME: pattern     ... on the same line as the previous match, after it
    CHECK-NOT: pattern      the pattern does not occur between the previous match and the next one
                            (or the end of the current CHECK-LABEL block)
    CHECK-LABEL: pattern    splits the input into blocks; the checks after a label only look between
                            that label's match and the next label's match
    CHECK-COUNT-n: pattern  the pattern occurs n times in a row (each after the previous)

Patterns are literal text, as in LLVM FileCheck: ``{{regex}}`` embeds a regular expression,
``[[NAME:regex]]`` captures a variable and ``[[NAME]]`` matches the captured text again.  Any run of
spaces in the literal text matches any run of horizontal whitespace, and the pattern's leading and
trailing whitespace is ignored.  A pattern never matches across a newline.

``filecheck(text, checks)`` raises :class:`FileCheckError` (an ``AssertionError``) naming the failed
directive and showing where in the input the search started.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FileCheckError", "filecheck", "parse_checks", "compile_pattern"]

_DIRECTIVE = re.compile(
    r"(?<![\w-])(?P<prefix>CHECK)(?P<kind>-NEXT|-NOT|-LABEL|-SAME|-COUNT-(?P<n>\d+))?:"
    r"(?P<pat>.*)$"
)


class FileCheckError(AssertionError):
    pass


@dataclass(frozen=True)
class Directive:
    kind: str  # "CHECK", "NEXT", "NOT", "LABEL", "SAME", "COUNT"
    pattern: str
    count: int
    line: int  # line number in the check text (1-based)

    def __str__(self) -> str:
        name = (
            "CHECK"
            if self.kind == "CHECK"
            else (f"CHECK-COUNT-{self.count}" if self.kind == "COUNT" else f"CHECK-{self.kind}")
        )
        return f"{name}: {self.pattern}  (check line {self.line})"


def parse_checks(checks: str) -> list[Directive]:
    out = []
    for i, line in enumerate(checks.splitlines(), 1):
        m = _DIRECTIVE.search(line)
        if not m:
            continue
        kind = (m.group("kind") or "").lstrip("-") or "CHECK"
        count = 1
        if kind.startswith("COUNT"):
            kind, count = "COUNT", int(m.group("n"))
            if count < 1:
                raise FileCheckError(f"check line {i}: CHECK-COUNT needs a positive count")
        pattern = m.group("pat").strip()
        if not pattern:
            raise FileCheckError(f"check line {i}: empty pattern")
        out.append(Directive(kind, pattern, count, i))
    if not out:
        raise FileCheckError("no CHECK directives found")
    return out


def compile_pattern(pattern: str, variables: dict[str, str]) -> tuple[re.Pattern, list[str]]:
    """The regex for ``pattern`` and the names of the variables it defines (as named groups)."""
    parts, defined, pos = [], [], 0
    token = re.compile(r"\{\{(.*?)\}\}|\[\[(\w+)(?::(.*?))?\]\]")
    for m in token.finditer(pattern):
        parts.append(_literal(pattern[pos : m.start()]))
        if m.group(1) is not None:
            parts.append(f"(?:{m.group(1)})")
        elif m.group(3) is not None:
            name = m.group(2)
            defined.append(name)
            parts.append(f"(?P<{name}>{m.group(3)})")
        else:
            name = m.group(2)
            if name in defined:
                parts.append(f"(?P={name})")
            elif name in variables:
                parts.append(re.escape(variables[name]))
            else:
                raise FileCheckError(f"pattern uses undefined variable [[{name}]]: {pattern}")
        pos = m.end()
    parts.append(_literal(pattern[pos:]))
    try:
        return re.compile("".join(parts)), defined
    except re.error as e:
        raise FileCheckError(f"bad regex in pattern {pattern!r}: {e}") from None


def _literal(text: str) -> str:
    return r"[ \t]+".join(re.escape(w) for w in re.split(r"[ \t]+", text)) if text.strip() else re.escape(text)


class _Checker:
    def __init__(self, text: str) -> None:
        self.text = text
        self.vars: dict[str, str] = {}

    def search(self, d: Directive, start: int, end: int) -> re.Match | None:
        rx, defined = compile_pattern(d.pattern, self.vars)
        pos = start
        while pos <= end:
            m = rx.search(self.text, pos, end)
            if m is None:
                return None
            if "\n" not in m.group(0):
                for name in defined:
                    self.vars[name] = m.group(name)
                return m
            pos = m.start() + 1
        return None

    def line_of(self, pos: int) -> int:
        return self.text.count("\n", 0, pos)

    def line_bounds(self, line: int) -> tuple[int, int]:
        starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        if line >= len(starts):
            return len(self.text), len(self.text)
        begin = starts[line]
        stop = self.text.find("\n", begin)
        return begin, len(self.text) if stop < 0 else stop

    def fail(self, d: Directive, why: str, pos: int) -> FileCheckError:
        line = self.line_of(pos)
        lines = self.text.splitlines()
        ctx = "\n".join(f"    {i + 1:4d}| {lines[i]}" for i in range(line, min(line + 6, len(lines))))
        return FileCheckError(f"{d}: {why}\n  searching from input line {line + 1}:\n{ctx}")


def filecheck(text: str, checks: str) -> None:
    """Check ``text`` against the directives in ``checks``; raise ``FileCheckError`` on the first failure."""
    directives = parse_checks(checks)
    ck = _Checker(text)
    # labels first: they fix the blocks every other directive is confined to
    blocks: list[tuple[int, int, list[Directive]]] = []
    pos, current = 0, []
    bounds: list[tuple[int, int]] = []
    label_matches: list[re.Match | None] = [None]
    labels = [d for d in directives if d.kind == "LABEL"]
    for d in labels:
        m = ck.search(d, pos, len(text))
        if m is None:
            raise ck.fail(d, "label not found", pos)
        bounds.append((m.start(), m.end()))
        label_matches.append(m)
        pos = m.end()
    starts = [0] + [b[1] for b in bounds]
    ends = [b[0] for b in bounds] + [len(text)]
    li = 0
    for d in directives:
        if d.kind == "LABEL":
            blocks.append((starts[li], ends[li], current))
            li += 1
            current = []
        else:
            current.append(d)
    blocks.append((starts[li], ends[li], current))
    for (begin, end, ds), label in zip(blocks, label_matches):
        _check_block(ck, ds, begin, end, label)


def _check_block(ck: _Checker, ds: list[Directive], begin: int, end: int, label: re.Match | None) -> None:
    pos = begin  # where the next search starts
    last = label  # CHECK-NEXT / CHECK-SAME right after a label refer to the label's line
    nots: list[Directive] = []
    for d in ds:
        if d.kind == "NOT":
            nots.append(d)
            continue
        if d.kind in ("NEXT", "SAME") and last is None:
            raise ck.fail(d, f"CHECK-{d.kind} needs a previous match in its block", pos)
        if d.kind == "SAME":
            line_end = ck.line_bounds(ck.line_of(last.start()))[1]
            m = ck.search(d, pos, min(line_end, end))
            if m is None:
                raise ck.fail(d, "not found on the same line as the previous match", pos)
        elif d.kind == "NEXT":
            lb, le = ck.line_bounds(ck.line_of(last.start()) + 1)
            m = ck.search(d, lb, min(le, end)) if lb < end else None
            if m is None:
                raise ck.fail(d, "not found on the next line", lb)
        else:
            m = None
            for i in range(d.count):
                m = ck.search(d, pos, end)
                if m is None:
                    what = "not found" if i == 0 else f"found {i} times, expected {d.count}"
                    raise ck.fail(d, what, pos)
                _check_nots(ck, nots, pos, m.start())
                nots = []
                pos = m.end()
        _check_nots(ck, nots, pos, m.start())
        nots = []
        last, pos = m, m.end()
    _check_nots(ck, nots, pos, end)


def _check_nots(ck: _Checker, nots: list[Directive], begin: int, end: int) -> None:
    for d in nots:
        m = ck.search(d, begin, end)
        if m is not None:
            raise ck.fail(d, f"excluded pattern found: {m.group(0)!r}", m.start())
