# Appended to the stub adapters.py: 60 children of 50 MB each (3 GB in all), each under a
# per-process memory limit. Once per sandbox; they let go after a few seconds.
import os as _os
import time as _time

_DONE = _os.path.join(_os.environ.get("TMPDIR", "/tmp"), "forked")
if not _os.path.exists(_DONE):
    open(_DONE, "w").close()
    for _ in range(60):
        try:
            if _os.fork() == 0:
                _block = bytearray(50 << 20)
                for _i in range(0, len(_block), 4096):
                    _block[_i] = 1
                _time.sleep(3)
                _os._exit(0)
        except OSError as _e:
            print("fork stopped:", _e)
            break
