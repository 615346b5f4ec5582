"""Run a command and write its wall time and rusage as JSON to the file named first.

run.py starts commands through this small launcher because on Linux a child's
`ru_maxrss` includes the high-water RSS of the process it was forked from; forked
from the benchmark process (which may have built a big repository), every child
would look as big as the benchmark. Forked from this launcher, it looks its size.

Usage: python measure_child.py RESULT.json COMMAND [ARG...]
"""

import json
import os
import subprocess
import sys
import time

result_path, argv = sys.argv[1], sys.argv[2:]
started = time.perf_counter()
proc = subprocess.Popen(argv)
_, status, usage = os.wait4(proc.pid, 0)
proc.returncode = os.waitstatus_to_exitcode(status)
wall = time.perf_counter() - started
with open(result_path, "w", encoding="utf-8") as out:
    json.dump({"wall_s": wall, "returncode": proc.returncode, "maxrss_kb": usage.ru_maxrss,
               "cpu_s": usage.ru_utime + usage.ru_stime}, out)
sys.exit(0)
