import gc
import os
import sys

from harness.cli import main

try:
    code = main()
except BrokenPipeError:  # `... | head` closed the pipe: stop quietly, as other commands do
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 1
gc.freeze()  # the process ends here: its last garbage collection need not walk torch's heap
raise SystemExit(code)
