# Appended to the stub adapters.py: a 3,000-deep folder in scratch (beyond any recursive remover's
# reach), its deepest folders made unreadable and unwritable, and a link out of it. Once per sandbox.
import os as _os

_top = _os.path.join(_os.environ.get("TMPDIR", "/tmp"), "deep")
if not _os.path.exists(_top):
    _os.mkdir(_top)
    _fd = _os.open(_top, _os.O_RDONLY)
    for _ in range(3000):
        _os.mkdir("d", dir_fd=_fd)
        _next = _os.open("d", _os.O_RDONLY, dir_fd=_fd)
        _os.close(_fd)
        _fd = _next
    _os.symlink("/usr", "out", dir_fd=_fd)
    _os.mkdir("locked", dir_fd=_fd)
    _os.chmod("locked", 0, dir_fd=_fd)
    _os.fchmod(_fd, 0o500)
    _os.close(_fd)
    print("deep tree made")
