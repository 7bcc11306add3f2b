# Appended to the stub adapters.py: change what a process of the same uid may change about the zygote
# that forked this worker (it forks the slot's next submission's workers too, which inherit all of it),
# (those of CHANGES), and leave a file in the scratch folder, its times changed. The next submission in the slot
# must meet none of it.
import os as _os
import resource as _resource

_zygote = _os.getppid()
_DONE = []
for _name, _change in [
        ("nice", lambda: _os.setpriority(_os.PRIO_PROCESS, _zygote, 19)),
        ("affinity", lambda: _os.sched_setaffinity(_zygote, {min(_os.sched_getaffinity(0))})),
        ("nofile", lambda: _resource.prlimit(_zygote, _resource.RLIMIT_NOFILE, (32, 32))),
        ("oom", lambda: open(f"/proc/{_zygote}/oom_score_adj", "w").write("900"))]:
    if _name not in CHANGES:
        continue
    try:
        _change()
        _DONE.append(_name)
    except OSError as _e:
        print("REFUSED", _name, _e)
with open(f"/scratch/harness-left-{MARK}", "w") as _f:
    _f.write("a hidden input")
_os.utime("/scratch")  # now, a moment the submission chooses: its digits a number for the next one (red team 14)
_DONE.append("file")
print("TAINTED", _DONE)
