# Appended to the reference's adapters.py (honest work): say what this worker inherited and found, and
# which zygote forked it (its start time, so that a kept sandbox shows as the same zygote).
import fcntl as _fcntl
import os as _os
import resource as _resource

with open(f"/proc/{_os.getppid()}/stat") as _f:
    _started = _f.read().rsplit(")", 1)[1].split()[19]
print("FOUND", {"nice": _os.getpriority(_os.PRIO_PROCESS, 0), "cpus": len(_os.sched_getaffinity(0)),
                "nofile": _resource.getrlimit(_resource.RLIMIT_NOFILE)[0], "scratch": sorted(_os.listdir("/scratch")),
                "scratch_mtime": _os.stat("/scratch").st_mtime_ns,
                "zygote": _started, "stdout": [_fcntl.fcntl(1, _fcntl.F_GETFL) & (_os.O_NONBLOCK | _os.O_APPEND
                                                                           | _fcntl.FASYNC), _fcntl.fcntl(1, 11)]})
