import os
import sys

from mindio_adaptor.core.process.process_ending import bound_the_exit
from mindio_adaptor.launch.entry import main

bound_the_exit(f"launcher pid {os.getpid()}")

sys.exit(main(prog="python -m mindio_adaptor.launch"))
