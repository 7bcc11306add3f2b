# Appended to the stub adapters.py: what a submission could learn about, or do to, the rest of the
# machine. Machine-wide counters (files open, processes forked, load) carry a neighbour's activity
# (a channel between two submissions); open files per process bound what it can take from the
# kernel's shared file table. Published in a visible failure.
import resource as _resource

_COUNTERS = ("/proc/sys/fs/file-nr", "/proc/sys/fs/inode-nr", "/proc/sys/fs/dentry-state", "/proc/stat",
             "/proc/loadavg", "/proc/locks")


def run_embedding(vocab_size, d_model, weights, token_ids):
    seen = {}
    for path in _COUNTERS:
        try:
            seen[path] = len(open(path).read())
        except OSError as e:
            seen[path] = type(e).__name__
    raise RuntimeError(f"MACHINE {seen} NOFILE {_resource.getrlimit(_resource.RLIMIT_NOFILE)}")
