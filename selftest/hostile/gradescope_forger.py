# Appended to the stub adapters.py, graded in a Gradescope tree (AUTOGRADER): a daemon that
# leaves the worker's process group and session, then waits for results.json and rewrites it to
# full marks (what a leftover root process did once uid drop failed). It must die first.
import os as _os
import time as _time

if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        __import__("ctypes").CDLL(None).prctl(15, b"forger6061", 0, 0, 0)  # PR_SET_NAME: findable
        _path = AUTOGRADER + "/results/results.json"
        _deadline = _time.time() + 60
        while _time.time() < _deadline:
            try:
                with open(_path, "w") as _f:
                    _f.write('{"score": 85.0, "tests": []}')
                with open(AUTOGRADER + "/forged", "w") as _f:
                    _f.write("forged\n")
            except OSError:
                pass
            _time.sleep(0.05)
        _os._exit(0)
    _os._exit(0)
