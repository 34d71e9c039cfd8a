import sys

from mindio_adaptor.launch.entry import main

sys.exit(main(prog="python -m mindio_adaptor.launch"))
