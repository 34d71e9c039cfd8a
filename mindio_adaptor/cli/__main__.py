import sys

from mindio_adaptor.cli import main

sys.exit(main())
