# Appended to the stub adapters.py: what a submission could learn about, or do to, the rest of the
# machine. Machine-wide counters (files open, processes forked, load) carry a neighbour's activity
# (a channel between two submissions); open files per process bound what it can take from the
# kernel's shared file table. Published in a visible failure.
import resource as _resource

_COUNTERS = ("/proc/sys/fs/file-nr", "/proc/sys/fs/inode-nr", "/proc/sys/fs/dentry-state", "/proc/stat",
             "/proc/loadavg", "/proc/locks", "/proc/uptime")


def run_embedding(vocab_size, d_model, weights, token_ids):
    import ctypes as _ctypes
    _libc = _ctypes.CDLL(None, use_errno=True)
    seen = {"sysinfo": 0 if _libc.sysinfo(_ctypes.create_string_buffer(256)) == -1 else "READ"}
    for path in _COUNTERS:
        try:
            seen[path] = len(open(path).read())
        except OSError as e:
            seen[path] = type(e).__name__
    raise RuntimeError(f"MACHINE {seen} NOFILE {_resource.getrlimit(_resource.RLIMIT_NOFILE)}")
