import gc

from harness.cli import main

code = main()
gc.freeze()  # the process ends here: its last garbage collection need not walk torch's heap
raise SystemExit(code)
