# Appended to the reference's adapters.py: a module's buffer listing and state dict sent as strings, not
# tensors. Red team 8: the tests read each entry as a tensor (b.numel(), t.device) and said "the grader failed".
import sys as _sys

_worker = _sys.modules.get("harness.grading.worker")
if _worker is not None:
    _module = _worker.Worker.module

    def _listing(self, handle, method, args):
        if method in ("named_buffers", "state_dict"):
            return {"value": {"table": "not a tensor"}}
        return _module(self, handle, method, args)

    _worker.Worker.module = _listing
