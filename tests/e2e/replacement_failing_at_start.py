"""The example's entry, except that every replacement process of rank MINDIO_TEST_FAILING_RANK (one its
launcher started again alone: MINDIO_RESTARTED=1) exits 3 before Megatron starts, as a process on a host whose
device cannot be opened would. A group restart's processes are no replacements, so they train."""
import os
import runpy
import sys

from mindio_adaptor.tiny.job import EXAMPLE

if os.environ.get("MINDIO_RESTARTED") == "1" and os.environ.get("RANK") == os.environ["MINDIO_TEST_FAILING_RANK"]:
    print(f"rank {os.environ['RANK']} (pid {os.getpid()}): this replacement cannot start (the test's fault)",
          flush=True)
    sys.exit(3)
sys.argv[0] = str(EXAMPLE)
sys.path.insert(0, str(EXAMPLE.parent))  # the example imports modules beside it
runpy.run_path(str(EXAMPLE), run_name="__main__")
