"""Commit a broken `add` (ticked with honest mul), then leave in the ignored __pycache__ a bytecode file of
the correct `add`, stamped with the broken source's mtime and size, so the gate imports the good code."""
import importlib.util
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403
from importlib._bootstrap_external import _code_to_timestamp_pyc

honest_mul(broken_add=True)
commit("Add mul")


def poison(rel: str, good: str) -> None:
    src = WORK / rel
    st = src.stat()
    code = compile(good, str(src), "exec")
    pyc = Path(importlib.util.cache_from_source(str(src)))
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(_code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))


poison("calc/__init__.py", GOOD_ADD)
say("done")
