"""`python -m spt_hf ...` is the `spt-hf` command."""

import sys

from .cli import main

sys.exit(main())
