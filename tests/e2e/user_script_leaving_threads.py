"""A user's entry script that leaves threads behind: an idle non-daemon thread that never ends and a
ThreadPoolExecutor never shut down, started before the training, which then runs as the example's own __main__.
Only the example's ending stands between them and a rank that never exits."""
import concurrent.futures
import runpy
import sys
import threading
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pretrain_gpt.py"

threading.Thread(target=threading.Event().wait, name="users-idle-thread").start()
pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="users-unshut-pool")
pool.submit(int).result()  # its worker idles from here on

if __name__ == "__main__":
    sys.path.insert(0, str(EXAMPLE.parent))  # older_megatron, beside the example
    sys.argv[0] = str(EXAMPLE)
    runpy.run_path(str(EXAMPLE), run_name="__main__")
