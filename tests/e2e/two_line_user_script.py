"""A user's own entry script: Megatron's pretraining with the README's two lines before it, and nothing of the
example (no garbage-collector freeze at import, no bounded ending): the stock script (stock_pretrain_gpt.py, which
ends the normal way) run after `patch_all()`."""
import runpy
import sys
from pathlib import Path

import mindio_adaptor

mindio_adaptor.patch_all()

if __name__ == "__main__":
    stock = Path(__file__).with_name("stock_pretrain_gpt.py")
    sys.argv[0] = str(stock)
    runpy.run_path(str(stock), run_name="__main__")
