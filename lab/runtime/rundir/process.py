"""Which process a pid is: its start time, recorded beside the pid so that a pid the system has since given
to another process is not taken for the run's (pids are reused; a start time is not)."""
from __future__ import annotations

import os


def start_time(pid: int) -> float | None:
    """When process `pid` started, in unix seconds to 1/100 s (Linux: boot time + /proc/<pid>/stat field 22,
    the same figure for one process however often it is read); None when there is no such process or no
    /proc to ask (then only the pid can be checked)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # field 2 (the command name) may hold spaces and parentheses: fields are counted after its last ')'
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return round(boot + ticks / os.sysconf("SC_CLK_TCK"), 2)
