"""No module of runner/ holds mutable state at module level outside its constants: what lives one session belongs
to an owner built for that session and passed on, never to a module every session (and every test) shares.

Checked at import: every module is imported and its module-level values read. A value counts as state when it is a
mutable container (dict, list, set, deque, bytearray, a weak collection) under a name that is not a constant's
(UPPER_CASE names are constants by the project's convention), or a function that remembers its answers
(`functools.cache`, `lru_cache`) but those in MEMOS: a cache keyed by a path or a sha is a session's, not a
module's. PENDING is what is left to move, name by name: an
entry that is gone must leave the list too, so it only shrinks.
"""

from __future__ import annotations

import collections
import functools
import importlib
import pkgutil
import weakref

import runner

MUTABLE = (dict, list, set, bytearray, collections.deque, weakref.WeakSet, weakref.WeakValueDictionary,
           weakref.WeakKeyDictionary)
# Functions whose remembered answers depend on their arguments alone and hold nothing of a session.
MEMOS = {
    "runner.core.ledger": {"_entry_adapter"},  # the ledger's schema, built once
    "runner.core.planfile_commonmark": {"_parser", "_tokens"},  # the Markdown parser, and a text's tokens
    "runner.adapters.render.prompts": {"_environment"},  # the templates' environment
}
PENDING: dict[str, set[str]] = {}


def _constant(name: str) -> bool:
    return name.lstrip("_").isupper() or name.startswith("__")


@functools.cache  # one import of the whole package per run
def _state() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for info in pkgutil.walk_packages(runner.__path__, "runner."):
        if info.name == "runner.__main__":
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if _constant(name) or isinstance(value, type):
                continue
            memo = (callable(value) and hasattr(value, "cache_info") and name not in MEMOS.get(info.name, set())
                    and getattr(value, "__module__", None) == info.name)  # (one imported is its own module's)
            if isinstance(value, MUTABLE) or memo:
                found.setdefault(info.name, set()).add(name)
    return found


def test_no_module_holds_mutable_state_beyond_what_is_listed_to_move():
    found = _state()
    new = {m: sorted(names - PENDING.get(m, set())) for m, names in found.items() if names - PENDING.get(m, set())}
    assert new == {}, "module-level state: give it an owner that lives as long as it should (a session's value)"


def test_the_list_of_state_to_move_only_shrinks():
    found = _state()
    gone = {m: sorted(names - found.get(m, set())) for m, names in PENDING.items() if names - found.get(m, set())}
    assert gone == {}, "these moved: remove them from PENDING"
