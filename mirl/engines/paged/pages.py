"""KV pages: a fixed pool of pages of `page_size` token slots, reference counts, and a prefix cache.

Every sequence's KV lives in pages listed in its page table, so sequences of any length share one
preallocated buffer and nothing is copied when a sequence grows. The rows of a group share the pages
of their prompt (a page is freed when its last holder lets go), and a full page is registered under
the tokens it holds and everything before it: a later prompt that starts with the same tokens (the
next turn of an episode is the last prompt, the reply and an observation) takes those pages instead
of prefilling them again.

Keys are exact, not hashes: a page's key is (the id of its parent page's key, its tokens), so two
prompts share a page only when every token up to its end is the same. A page no sequence holds but
whose key is registered waits in an LRU and is reused (its key forgotten) only when the free list is
empty. `clear()` forgets every key, as new weights make every cached KV stale.

Page 0 is never handed out: padding rows of a decode batch write and read there.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence


class OutOfPages(RuntimeError):
    """The pool cannot hold what was asked for."""


Key = tuple[int, tuple[int, ...]]


class PagePool:
    def __init__(self, num_pages: int, page_size: int):
        if num_pages < 2:
            raise ValueError(f"a page pool needs at least 2 pages (page 0 is reserved), got {num_pages}")
        self.num_pages, self.page_size = int(num_pages), int(page_size)
        self.free: deque[int] = deque(range(1, self.num_pages))
        self.refs = [0] * self.num_pages
        self.key_of: list[Key | None] = [None] * self.num_pages
        self.id_of: list[int] = [0] * self.num_pages  # the key id of a registered page
        self.cached: dict[Key, tuple[int, int]] = {}  # key -> (page, key id)
        self.idle: OrderedDict[int, None] = OrderedDict()  # registered pages nobody holds, oldest first
        self.reserved = 0  # pages promised to admitted requests but not yet taken
        self._next_id = 1
        self.hits = 0  # pages served from the cache so far

    # --- counting ------------------------------------------------------------------------------

    @property
    def available(self) -> int:
        """Pages that could be handed out now, less what admitted requests were promised."""
        return len(self.free) + len(self.idle) - self.reserved

    @property
    def in_use(self) -> int:
        return self.num_pages - 1 - len(self.free) - len(self.idle)

    def reserve(self, n: int) -> None:
        if n > self.available:
            raise OutOfPages(f"{n} pages asked for, {self.available} available of {self.num_pages - 1}")
        self.reserved += n

    def unreserve(self, n: int) -> None:
        self.reserved -= n
        assert self.reserved >= 0, "more pages unreserved than reserved"

    # --- pages ---------------------------------------------------------------------------------

    def take(self, reserved: bool = True) -> int:
        """One page for a holder (from the reservation when `reserved`)."""
        if reserved:
            self.unreserve(1)
        elif self.available < 1:
            raise OutOfPages(f"no page left of {self.num_pages - 1}")
        if self.free:
            page = self.free.popleft()
        else:  # the least recently used cached page: its key goes
            page, _ = self.idle.popitem(last=False)
            self._forget(page)
        self.refs[page] = 1
        return page

    def hold(self, page: int) -> None:
        if self.refs[page] == 0:
            self.idle.pop(page, None)
        self.refs[page] += 1

    def release(self, pages: Sequence[int]) -> None:
        for page in pages:
            self.refs[page] -= 1
            assert self.refs[page] >= 0, f"page {page} released more often than held"
            if self.refs[page] == 0:
                if self.key_of[page] is not None:
                    self.idle[page] = None
                else:
                    self.free.append(page)

    # --- the prefix cache ----------------------------------------------------------------------

    def match(self, tokens: Sequence[int], limit: int) -> tuple[list[int], int]:
        """The cached pages that hold the first whole pages of `tokens`, at most `limit` tokens'
        worth, each held for the caller: (pages, key id of the last one, 0 for none)."""
        pages, parent, p = [], 0, self.page_size
        for start in range(0, limit // p * p, p):
            hit = self.cached.get((parent, tuple(tokens[start:start + p])))
            if hit is None:
                break
            page, parent = hit
            self.hold(page)
            pages.append(page)
        self.hits += len(pages)
        return pages, parent

    def register(self, page: int, parent: int, tokens: Sequence[int]) -> int:
        """Register a full page holding `tokens` after the page of key id `parent`; returns its key
        id (an existing page's when those tokens are cached already: this page then stays private)."""
        key = (parent, tuple(tokens))
        hit = self.cached.get(key)
        if hit is not None:
            return hit[1]
        if self.key_of[page] is not None:  # already registered under another key: keep that one
            return self.id_of[page]
        kid, self._next_id = self._next_id, self._next_id + 1
        self.cached[key] = (page, kid)
        self.key_of[page], self.id_of[page] = key, kid
        return kid

    def _forget(self, page: int) -> None:
        key = self.key_of[page]
        if key is not None:
            del self.cached[key]
            self.key_of[page], self.id_of[page] = None, 0

    def clear(self) -> None:
        """Forget every cached prefix (the KV was computed with other weights)."""
        for page in list(self.idle):
            self.free.append(page)
        self.idle.clear()
        for page in range(self.num_pages):
            self.key_of[page], self.id_of[page] = None, 0
        self.cached.clear()
