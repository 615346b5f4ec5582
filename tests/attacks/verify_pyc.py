"""Tick 1.1 with a wrong `mul` (same size as the right one), and leave the right one's bytecode in the
ignored __pycache__ so that the checkpoint's `verify:` passes in the work tree."""
import importlib.util
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403
from importlib._bootstrap_external import _code_to_timestamp_pyc

write("calc/mul.py", MUL.replace("a * b", "a + b"))
tick("1.1")
commit("Add mul")
src = WORK / "calc" / "mul.py"
st = src.stat()
pyc = Path(importlib.util.cache_from_source(str(src)))
pyc.parent.mkdir(exist_ok=True)
pyc.write_bytes(_code_to_timestamp_pyc(compile(MUL, str(src), "exec"), int(st.st_mtime), st.st_size))
say("done")
