"""Packing units into chunk spans: the greedy packer (fill, split, merge, tables, overlap)."""
from __future__ import annotations

import bisect
import collections
import math
import re
from typing import Iterable, NamedTuple

from .document import ANALYSIS_OVERLAP_SHARE, HEADING_SHARE, OVERLAP_SHARE, ChunkSettings, _utf8_len
from .units import (_B, _BLANKLINES, _C, _CODE_LEVELS, _CUT_COL0, _CUT_SENT, _CUT_SIG, _FILL_LEVELS, _FWD_PARA, _FWD_SENT,
                    _FWD_STMT, _FWD_TOP, _H, _L, _LAST_TR, _LIST_LEVELS, _MIDLINE, _NONSPACE, _P, _PREPROC,
                    _SRC_LEVELS, _SRC_STRUCT, _T, _TEXT_LEVELS, _TR, _WORD_LEVELS, _quoted_regions)


class _Span(NamedTuple):
    """A chunk before its text is built (plan_document needs no texts)."""

    start: int
    body_start: int
    end: int
    prefix: str
    heading_path: tuple[str, ...]
    kind: str
    nbytes: int
    sections: tuple[tuple[str, ...], ...]


# ---------------------------------------------------------------- packing

class _Peek:
    """An iterator with look-ahead (a deque holds what was peeked, at most a chunk's units)."""

    def __init__(self, it: Iterable[tuple]) -> None:
        self.it = iter(it)
        self.buf: collections.deque = collections.deque()

    def __iter__(self) -> "_Peek":
        return self

    def __next__(self) -> tuple:
        return self.buf.popleft() if self.buf else next(self.it)

    def peek(self, i: int) -> tuple | None:
        """The unit i places ahead (0: the next one), or None past the end."""
        while len(self.buf) <= i:
            try:
                self.buf.append(next(self.it))
            except StopIteration:
                return None
        return self.buf[i]


class _Packer:
    """Greedy packer over tiled units; keeps byte counts so sizes are exact."""

    def __init__(self, text: str, settings: ChunkSettings, code_doc: bool,
                 regions: list[tuple[int, int]] | None = None) -> None:
        """State of the one open chunk (``c_*``) plus the heading stack."""
        self.t = text
        self.ascii = text.isascii()
        self.budget = settings.max_bytes
        self.bpt = settings.bytes_per_token
        self.min_size = settings.min_size
        self.overlap = settings.overlap
        self.carry = settings.carry_heading
        self.code_doc = code_doc
        self.overlap_share = ANALYSIS_OVERLAP_SHARE if settings.purpose == "analysis" else OVERLAP_SHARE
        self.regions = (_quoted_regions(text) if regions is None else regions) if code_doc else []
        self.region_starts = [r[0] for r in self.regions]
        self.analysis = settings.purpose == "analysis"
        self.fill_bytes = math.ceil(settings.fill_share * self.budget)
        self.explicit_fill = settings.fill is not None
        self.spans: list[_Span] = []
        self.headings: list[tuple[int, str, int, int]] = []
        self.hgen = 0                    # bumped on every heading: a new section began
        self.open = False
        self.prev: tuple | None = None   # body_start, end, last, kind, last_code
        self._reset(0, 0, "", 0, False)

    # -- byte helpers -------------------------------------------------
    # (``_TokenPacker`` gives these the model's tokens instead: every size below is in the unit
    # they count, and the rules stay the same)
    def plen(self, text: str) -> int:
        """The size of a string that is not a slice of the text (a carried heading, a header row)."""
        return _utf8_len(text)

    def ahead(self, p: int, n: int) -> int:
        """An offset at least a chunk's size past ``p`` (at most ``n``): how far a look-ahead goes."""
        return min(n, p + self.budget)

    def own_tokens(self) -> int:
        """The open chunk's own text in (estimated) tokens."""
        return math.ceil(self.c_own / self.bpt)

    def nb(self, a: int, b: int) -> int:
        """UTF-8 bytes of t[a:b] (no copy for ASCII documents)."""
        if self.ascii:
            return b - a
        return self.plen(self.t[a:b])

    def within(self, a: int, e: int, room: int) -> int:
        """Largest p <= e with bytes(t[a:p]) <= room."""
        hi = min(e, a + room)
        if self.ascii:
            return hi
        s = self.t[a:hi]
        if s.isascii():
            return hi
        raw = s.encode("utf-8", "surrogatepass")
        if len(raw) <= room:
            return hi
        i = room
        while i > 0 and (raw[i] & 0xC0) == 0x80:
            i -= 1
        return a + len(raw[:i].decode("utf-8", "surrogatepass"))

    def back_within(self, lo: int, e: int, cap: int) -> int:
        """Smallest p >= lo with bytes(t[p:e]) <= cap."""
        p = max(lo, e - cap)
        if self.ascii:
            return p
        raw = self.t[p:e].encode("utf-8", "surrogatepass")
        skip = len(raw) - cap
        if skip <= 0:
            return p
        while skip < len(raw) and (raw[skip] & 0xC0) == 0x80:
            skip += 1
        return p + len(raw[:skip].decode("utf-8", "surrogatepass"))

    # -- chunk state --------------------------------------------------
    def _reset(self, start: int, body: int, prefix: str, fixed: int, table: bool) -> None:
        """Make [start, body) + prefix the new open chunk with no own text yet."""
        self.c_start, self.c_body, self.c_end = start, body, body
        self.c_prefix, self.c_fixed, self.c_own = prefix, fixed, 0
        self.c_table, self.c_code = table, True
        self.c_last, self.c_last_code, self.c_last_table = body, False, False
        self.c_inner = False             # a table row group that ends before the table's last row
        self.c_path = tuple(h[1] for h in self.headings)
        self.c_sections = [self.c_path]
        self.c_hgen = self.hgen

    def _append(self, a: int, b: int, nbytes: int, code: bool, last: int) -> None:
        """Add t[a:b] to the open chunk's own part (and note a section it enters)."""
        self.c_end = b
        self.c_own += nbytes
        self.c_code = self.c_code and code
        self.c_last, self.c_last_code, self.c_last_table = last, code, False
        if self.c_hgen != self.hgen:
            self.c_hgen = self.hgen
            path = tuple(h[1] for h in self.headings)
            if path != self.c_sections[-1]:
                self.c_sections.append(path)

    def _close(self) -> None:
        """Emit the open chunk as a span and remember it for the next overlap."""
        if not self.open:
            return
        self.open = False
        if self.c_end <= self.c_body:
            return
        # blank lines left after a table are no table (a chunk of them is "text"); a row group of
        # only the newline between two rows (the row before it filled a chunk) still is one
        table = self.c_table and (self.c_inner or not self.t[self.c_body:self.c_end].isspace())
        kind = "table" if table else ("code" if self.c_code or self.code_doc else "text")
        self.spans.append(_Span(self.c_start, self.c_body, self.c_end, self.c_prefix,
                                self.c_path, kind, self.c_fixed + self.c_own,
                                tuple(self.c_sections)))
        # no overlap is carried out of a table (seed 002): a table row would start the text
        self.prev = (self.c_body, self.c_end, self.c_last,
                     "table" if self.c_last_table else kind, self.c_last_code)

    def _heading_prefix(self, ov: int) -> str:
        """The section's heading line, if the chunk starts after it (carried heading)."""
        if not self.carry or not self.headings:
            return ""
        _, _, hs, he = self.headings[-1]
        if hs >= ov:
            return ""
        hs = _BLANKLINES.match(self.t, hs, he).end()   # a first unit owns leading blank lines
        prefix = self.t[hs:he] + "\n\n"
        return prefix if self.plen(prefix) <= self.budget // HEADING_SHARE else ""

    def _open(self, s: int, first: int, heading_first: bool) -> None:
        """Open a text chunk at s, with overlap and carried heading when they fit.

        Both are dropped when the first unit (``first`` bytes) fits a bare chunk
        but not with them: cutting a unit that fits would break invariant 4.
        """
        ov = self._overlap_start(s)
        prefix = "" if heading_first else self._heading_prefix(ov)
        pb = self.plen(prefix)
        ob = self.nb(ov, s)
        if first <= self.budget:
            if pb + ob + first > self.budget:
                ov, ob = s, 0
            if pb + first > self.budget:
                prefix, pb = "", 0
        self._reset(ov, s, prefix, pb + ob, False)
        self.open = True

    # -- overlap ------------------------------------------------------
    def _overlap_start(self, s: int) -> int:
        """Start of the overlap carried from the previous chunk (s when none)."""
        if self.overlap == "none" or self.prev is None:
            return s
        pb, pe, last, kind, last_code = self.prev
        if kind == "table" or pe != s:
            return s
        cap = self.budget // self.overlap_share
        t = self.t
        if self.overlap == "paragraph" and self.nb(last, pe) <= cap:
            cand = last
        else:
            lo = self.back_within(pb, pe, cap)
            ce = lo + len(t[lo:pe].rstrip())
            if ce <= lo:
                return s
            cand = self._tail_start(lo, ce, last, last_code or kind == "code",
                                    earliest=self.overlap == "paragraph")
        if cand is None or cand >= pe or _NONSPACE.search(t, cand, pe) is None:
            return s
        return cand

    def _tail_start(self, lo: int, ce: int, last: int, code: bool,
                    earliest: bool) -> int | None:
        """A sentence (code: line) start in [lo, ce): the first one when a
        paragraph shrinks to its last sentences, the last one for ``sentence``."""
        t = self.t
        if code:
            if earliest:
                m = _FWD_PARA.search(t, lo, ce)
                if m is not None and m.end() < ce:
                    return m.end()
                i = t.find("\n", lo, ce)
            else:
                i = t.rfind("\n", lo, ce)
            cands = [i + 1] if 0 <= i < ce - 1 else []
        elif earliest:
            m = _FWD_SENT.search(t, lo, ce)
            cands = [m.end()] if m is not None and m.end() < ce else []
        else:
            m = _CUT_SENT.match(t, lo, ce)
            cands = [m.end()] if m is not None and m.end() < ce else []
        if last >= lo:
            cands.append(last)
        if not cands:
            return None
        return min(cands) if earliest else max(cands)

    # -- cutting ------------------------------------------------------
    def _find_cut(self, a: int, e: int, room: int, levels: tuple) -> int | None:
        """Best cut in (a, e) within room bytes, or None if no boundary fits.

        A level's cut is accepted when it keeps a quarter of the room; else the
        latest cut of any level is used.  None means even one word (row) does
        not fit, and the caller retries in a bare chunk or cuts inside a word.
        """
        lim = self.within(a, e, room)
        if lim <= a:
            return None
        long_line = self._long_line(lim, e)
        quarter = a + (lim - a) // 4
        best = None
        src = levels is _SRC_LEVELS
        floor = a
        if src:            # a top-level statement that fits a chunk is never cut
            ts = self._stmt_around(a, lim, e)
            if ts is not None and ts < 0:
                floor = -ts               # cut after its end
            elif ts is not None:
                if ts <= a:
                    return None           # it starts here and fits only a fresh chunk
                return ts                 # the last statement start in the window
        for level in levels:
            if level in _MIDLINE and not long_line:
                continue                  # never inside a line that fits a chunk
            if src and level in _SRC_STRUCT:
                end = self._src_match(level, a, lim)
            else:
                m = level.match(self.t, a, lim)
                end = None if m is None else m.end()
            if end is not None and end > floor:
                if end >= quarter:
                    return end
                if best is None or end > best:
                    best = end
        return best

    def _in_region(self, p: int) -> int | None:
        """Start of the triple-quoted string / block comment holding p, else None."""
        i = bisect.bisect_right(self.region_starts, p) - 1
        if i >= 0 and self.regions[i][0] < p < self.regions[i][1]:
            return self.regions[i][0]
        return None

    def _src_match(self, level: re.Pattern, a: int, lim: int) -> int | None:
        """The last cut of a structural source level in (a, lim] outside strings/comments."""
        while lim > a:
            m = level.match(self.t, a, lim)
            if m is None or m.end() <= a:
                return None
            rs = self._in_region(m.end())
            if rs is None:
                return m.end()
            lim = rs
        return None

    def _stmt_around(self, a: int, lim: int, e: int) -> int | None:
        """Source: the last top-level statement that starts in the window [a, lim) and fits a
        chunk.  Its start (with its decorator and comment lines) if the window ends inside
        it; minus its text's end if it ends in the window; None if there is none."""
        t = self.t
        ts = self._src_match(_CUT_COL0, a, lim) or a
        if ts == a and not (a == 0 or t[a - 1] == "\n"):
            return None                   # a is inside a line: no statement starts here
        h = ts
        while h < lim and t.startswith(("@", "#", "//", "/*"), h) and not _PREPROC.match(t, h):
            nl = t.find("\n", h, lim)
            if nl < 0:
                break
            h = nl + 1                    # the statement proper starts after its header lines
        end = self._top_end(h, e)
        if end is None:
            return None
        if end <= lim:
            return -end                   # it ends in the window: cut after it
        # decorator lines just above belong to it; comment lines too, while it still fits
        while ts > a:
            p = t.rfind("\n", a, ts - 1) + 1
            if p <= a and not (a == 0 or t[a - 1] == "\n"):
                break
            p = max(p, a)
            deco = t.startswith("@", p)
            if not (deco or t.startswith(("#", "//"), p)) or _PREPROC.match(t, p):
                break
            if not deco and self.nb(p, end) > self.budget:
                break
            ts = p
        return ts if self.nb(ts, end) <= self.budget else None

    def _top_end(self, a: int, e: int) -> int | None:
        """Source: where the text of the top-level statement (definition) that starts at a
        ends (before the next line at column 0 outside strings and comments), if that is
        within a chunk of a; else None."""
        n = len(self.t)
        lim = self.within(a, n, self.budget)
        hi = self.ahead(lim, n)                   # far enough to see past blank lines
        for m in _FWD_TOP.finditer(self.t, a + 1, hi):
            if self._in_region(m.end()) is None:
                ce = self._content_end(a, m.end())
                return ce if ce <= lim else None
        if hi < n:
            return None
        ce = self._content_end(a, n)
        return ce if ce <= lim else None

    def _long_line(self, p: int, e: int) -> bool:
        """True if the line holding offset p is larger than a chunk (so it must be cut
        inside).  Looks at most a chunk's length either way."""
        t, w = self.t, self.budget + 1
        lo = t.rfind("\n", max(0, p - w), p)
        if lo < 0 and p - w > 0:
            return True
        hi = t.find("\n", p, min(e, p + w))
        if hi < 0 and p + w < e:
            return True
        return self.nb(lo + 1, e if hi < 0 else hi) > self.budget

    def _content_end(self, s: int, e: int) -> int:
        """End of t[s:e] without trailing whitespace (looks only at the tail)."""
        w = 64
        while True:
            lo = max(s, e - w)
            k = len(self.t[lo:e].rstrip())
            if k or lo == s:
                return lo + k
            w *= 4

    def _split(self, a: int, e: int, levels: tuple, code: bool, rest: int, ws: int) -> None:
        """Spread a unit too large for the open chunk over several chunks.

        ``rest`` (bytes of t[a:e]) and ``ws`` (its trailing whitespace) are
        kept up to date instead of recounted, so a huge unit costs O(n).
        """
        while True:
            room = self.budget - self.c_fixed - self.c_own
            if rest <= room:
                self._append(a, e, rest, code, a)
                return
            if rest - ws <= room:                 # only trailing whitespace overflows
                cut = self.within(a, e, room)
            else:
                cut = self._find_cut(a, e, room, levels)
                if cut is None:
                    if self.c_own or self.c_fixed:    # retry in a bare chunk
                        self._close()
                        self._reset(a, a, "", 0, False)
                        self.open = True
                        continue
                    cut = self.within(a, e, room)     # one word larger than a chunk
            piece = self.nb(a, cut)
            self._append(a, cut, piece, code, a)
            self._close()
            rest -= piece
            ws = min(ws, rest)
            self._open(cut, rest - ws, False)
            a = cut

    def _fill_cut(self, us: int, e: int) -> int | None:
        """Analysis: where to cut a paragraph or list that fits a chunk but not the rest of
        the open one, to fill it first; at a line end after the unit's first line, or None."""
        if not self.open or self.c_fixed + self.c_own >= self.fill_bytes:
            return None
        lim = self.within(self.c_end, e, self.budget - self.c_fixed - self.c_own)
        first = self.t.find("\n", us, lim)
        if first < 0:
            return None
        best = None
        for level in _FILL_LEVELS:
            m = level.match(self.t, first, lim)
            if m is not None and m.end() > first and (best is None or m.end() > best):
                best = m.end()
        return best if best is not None and best < e else None

    def _src_fill_cut(self, us: int, e: int) -> int | None:
        """Analysis: the last top-level statement start of a source unit that fits in the
        room left (outside strings and block comments), to fill the open chunk; or None."""
        if not self.open or self.c_fixed + self.c_own >= self.fill_bytes:
            return None
        lim = self.within(self.c_end, e, self.budget - self.c_fixed - self.c_own)
        best = None
        for m in _FWD_STMT.finditer(self.t, us + 1, lim):
            p = m.end()
            i = bisect.bisect_right(self.region_starts, p) - 1
            if i < 0 or not self.regions[i][0] < p < self.regions[i][1]:
                best = p
        return best if best is not None and best < e else None

    def _place(self, s: int, us: int, e: int, typ: str) -> None:
        """Place a text/code unit (with pending headings from s) into chunks."""
        code = typ in (_C, _B) and s == us
        n = self.nb(s, e)
        if self.open and self.analysis and self.c_own:
            self.c_table = False                  # text joins a chunk that held a table
        if self.open and self.c_fixed + self.c_own + n <= self.budget:
            self._append(s, e, n, code, us)
            return
        ws = self.nb(self._content_end(s, e), e) if n > self.budget else 0
        nc = n - ws                               # what must stay whole if it fits
        if self.analysis and typ in (_P, _L, _B) and n <= self.budget:
            cut = self._src_fill_cut(us, e) if typ == _B else self._fill_cut(us, e)
            if cut is not None:                   # fill the open chunk with the unit's first part
                piece = self.nb(s, cut)
                self._append(s, cut, piece, code, us)
                self._close()
                rest = n - piece
                self._open(cut, rest, False)
                levels = (_SRC_LEVELS if typ == _B else _LIST_LEVELS if typ == _L
                          else _TEXT_LEVELS)
                self._split(cut, e, levels, code, rest, self.nb(self._content_end(cut, e), e))
                return
        if s < us and nc > self.budget:
            nh = self.nb(s, us)
            if nc - nh <= self.budget:            # headings and unit cannot share a chunk
                if not (self.open and self.c_fixed + self.c_own + nh <= self.budget):
                    self._close()
                    self._open(s, nh, True)
                self._split(s, us, _TEXT_LEVELS, False, nh, self.nb(self._content_end(s, us), us))
                self._close()
                self._place(us, us, e, typ)
                return
        levels = (_SRC_LEVELS if typ == _B else _CODE_LEVELS if typ == _C
                  else _LIST_LEVELS if typ == _L else _TEXT_LEVELS)
        if (nc > self.budget and self.open
                and self.budget - self.c_fixed - self.c_own >= self.budget // 4):
            self._split(s, e, levels, code, n, ws)     # too big anyway: fill this chunk
            return
        self._close()
        self._open(s, nc, s < us)
        self._split(s, e, levels, code, n, ws)

    def _row_cut(self, a: int, e: int, room: int, lo: int, html: bool) -> int | None:
        """Last row start in [max(a+1, lo), e) within room bytes, or None.

        A row whose text fits but whose newline does not ends the group too.
        """
        lim = self.within(a, e, room)
        lo = max(a + 1, lo)
        if lim < lo:
            return None
        t = self.t
        if html:
            m = _LAST_TR.match(t, lo, lim)
            if m is not None:
                return m.end()
            m = _TR.search(t, lim, e)
            nxt = m.start() if m is not None else e
        else:
            i = t.rfind("\n", lo - 1, lim)
            if i >= 0:
                return i + 1
            nxt = t.find("\n", lim, e)
            nxt = e if nxt < 0 else nxt
        if _NONSPACE.search(t, lim, nxt) is None:   # the row fits without its newline
            return lim
        return None

    def _table_cut(self, a: int, e: int, room: int, lo: int, html: bool) -> int | None:
        """Where a row group ends; None asks for a bare group (no repeated header)."""
        cut = self._row_cut(a, e, room, lo, html)
        if cut is None and (self.c_fixed or self.c_own):
            return None
        if cut is None and lo > a + 1:            # caption + header too big: any line
            cut = self._row_cut(a, e, room, a + 1, html)
        if cut is None:                           # one row larger than a chunk
            cut = self._find_cut(a, e, room, _WORD_LEVELS) or self.within(a, e, room)
        return cut

    def _table(self, s: int, ts: int, e: int, info: tuple) -> None:
        """Emit a table; too large, it becomes row groups repeating the header.

        Retrieval (seed 002): the table is alone in its chunks.  Analysis: it joins the
        open chunk when it fits, or when that chunk is not yet filled (then it is cut
        between rows, the first group keeping at least one row), and the last group stays
        open for the text after it.
        """
        hdr, body, html = info
        n = self.nb(s, e)
        ws = self.nb(self._content_end(s, e), e) if n > self.budget else 0
        heading = "" if s < ts else self._heading_prefix(s)
        if self.plen(heading) + n - ws > self.budget:
            heading = ""
        header = self.t[hdr:body].rstrip("\n") + "\n" if body > hdr else ""
        if self.plen(header) > self.budget // 2:
            header = ""
        a, lo, rest = s, body, n
        ce = self._content_end(s, e)
        used = self.c_fixed + self.c_own
        if (self.analysis and self.open and self.c_own
                and (used + n <= self.budget or used < self.fill_bytes)):
            lo = body + 1                         # shares the open chunk
        else:
            self._close()
            self._reset(s, s, heading, self.plen(heading), True)
            self.open = True
        while True:
            room = self.budget - self.c_fixed - self.c_own
            if rest <= room:
                self._append(a, e, rest, False, a)
                self.c_last_table = True
                if not self.analysis:
                    self._close()
                return
            cut = (self.within(a, e, room) if rest - ws <= room
                   else self._table_cut(a, e, room, lo, html))
            if cut is None:
                if self.c_own:                    # no row fits the open chunk: start afresh
                    self._close()
                    self._reset(a, a, heading, self.plen(heading), True)
                    lo = body
                elif header and self.c_prefix != header and self.c_prefix.endswith(header):
                    # heading + header + next row too big: drop the heading, keep the header
                    # (a continued table's group starts with its header when header + row fit)
                    self._reset(a, a, header, self.plen(header), True)
                else:
                    self._reset(a, a, "", 0, True)
                self.open = True
                continue
            piece = self.nb(a, cut)
            self._append(a, cut, piece, False, a)
            self.c_last_table = True
            self.c_table = self.c_table and cut > hdr     # heading/caption alone is not a table
            self.c_inner = cut < ce                       # more rows follow this group
            self._close()
            rest -= piece
            a, lo = cut, cut
            if rest <= ws:
                break
            prefix = self._heading_prefix(cut) + (header if cut >= body else "")
            if self.plen(prefix) > self.budget // 2:
                prefix = header
            self._reset(cut, cut, prefix, self.plen(prefix), True)
            self.open = True
        self._reset(a, a, "", 0, False)           # whitespace left: joins the next text
        self.open = True
        self._split(a, e, _TEXT_LEVELS, False, rest, rest)

    def _push_heading(self, s: int, info: tuple) -> None:
        """Update the heading stack that gives heading_path and carried headings."""
        level, title, line_end = info
        while self.headings and self.headings[-1][0] >= level:
            self.headings.pop()
        self.headings.append((level, title, s, line_end))
        self.hgen += 1

    def _section_ends_chunk(self, units: "_Peek", s: int, e: int) -> bool:
        """Does the heading at [s, e) end the open chunk?

        Retrieval (seed 002): once the chunk's own text reaches min_tokens.  Analysis
        (seed 000): only once the chunk holds ``fill`` of the room, and not even then
        when the whole next section (up to the heading after its first content) still
        fits in the room left: a section is then never cut for nothing.
        """
        used = self.c_fixed + self.c_own
        if not (self.analysis or self.explicit_fill):
            return self.own_tokens() >= self.min_size
        if used < self.fill_bytes:
            return False
        if not self.analysis:
            return True
        need, room, content, i = self.nb(s, e), self.budget - used, False, 0
        while need <= room:
            u = units.peek(i)
            if u is None or (u[2] == _H and content):
                return False
            content = content or u[2] != _H
            need += self.nb(u[0], u[1])
            i += 1
        return True

    def run(self, units: Iterable[tuple]) -> list[_Span]:
        """Pack all units; returns spans in order."""
        pend = -1
        units = _Peek(units)
        for s, e, typ, info in units:
            if typ == _H:
                if pend < 0:
                    if self.open and self._section_ends_chunk(units, s, e):
                        self._close()
                    pend = s
                self._push_heading(s, info)
                continue
            start = pend if pend >= 0 else s
            pend = -1
            if typ == _T:
                self._table(start, s, e, info)
            else:
                self._place(start, s, e, typ)
        if pend >= 0:                   # headings at the very end
            self._place(pend, pend, len(self.t), _P)
        self._close()
        return self.spans


class _TokenPacker(_Packer):
    """The same packer sized by the model's own tokens (issue 30): the size of ``t[a:b]`` is the
    number of the document's tokens that start in [a, b) (``starts``, from one tokenization of the
    whole text), additive like bytes; a prefix string is counted by the counter itself.  The budget
    is the chunk's size less ``TOKEN_SLACK`` (a piece tokenized alone may differ by a token at each
    end); ``chunks._spans`` checks each chunk's own count after packing."""

    def __init__(self, text: str, settings: ChunkSettings, code_doc: bool, starts, counter,
                 regions: list[tuple[int, int]] | None = None) -> None:
        super().__init__(text, settings, code_doc, regions)
        self.starts, self.counter = starts, counter
        self.budget = settings.max_tokens
        self.fill_bytes = math.ceil(settings.fill_share * self.budget)
        self._plen: dict[str, int] = {}

    def plen(self, text: str) -> int:
        if not text:
            return 0
        n = self._plen.get(text)
        if n is None:
            n = self._plen[text] = self.counter.count(text)
        return n

    def own_tokens(self) -> int:
        return self.c_own

    def nb(self, a: int, b: int) -> int:
        if b <= a:
            return 0
        return bisect.bisect_left(self.starts, b) - bisect.bisect_left(self.starts, a)

    def within(self, a: int, e: int, room: int) -> int:
        """Largest p <= e whose [a, p) holds at most ``room`` token starts (the next token's start)."""
        if room < 0:
            return a
        i = bisect.bisect_left(self.starts, a) + room
        if i >= len(self.starts):
            return e
        return max(a, min(e, self.starts[i]))

    def back_within(self, lo: int, e: int, cap: int) -> int:
        """Smallest p >= lo (at a token start) whose [p, e) holds at most ``cap`` token starts."""
        j = bisect.bisect_left(self.starts, e) - cap
        if j <= 0:
            return lo
        return min(e, max(lo, self.starts[j]))

    def ahead(self, p: int, n: int) -> int:
        return max(min(n, p + 1), self.within(p, n, self.budget))

    def _src_fill_cut(self, us: int, e: int) -> int | None:
        """As the packer's, and when no top-level statement starts in the room left, the last nested
        definition start (a method of a class) that does: with exact sizes a chunk that is not yet
        ``fill`` full takes the first methods of a class that fits a chunk but not its rest, rather
        than ending half empty (bench/bench_plan.py: argparse.py)."""
        cut = super()._src_fill_cut(us, e)
        if cut is not None or not self.open or self.c_fixed + self.c_own >= self.fill_bytes:
            return cut
        lim = self.within(self.c_end, e, self.budget - self.c_fixed - self.c_own)
        first = self.t.find("\n", us, lim)
        if first < 0:
            return None
        cut = self._src_match(_CUT_SIG, first, lim)
        return cut if cut is not None and first < cut < e else None

    def _long_line(self, p: int, e: int) -> bool:
        """As the packer's, with the window a chunk's tokens wide instead of its bytes."""
        t, w = self.t, self.budget + 1
        back = self.back_within(0, p, w)
        lo = t.rfind("\n", back, p)
        if lo < 0 and back > 0:
            return True
        fwd = self.within(p, e, w)
        hi = t.find("\n", p, fwd)
        if hi < 0 and fwd < e:
            return True
        return self.nb(lo + 1, e if hi < 0 else hi) > self.budget
