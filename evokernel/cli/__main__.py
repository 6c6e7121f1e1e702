"""`python -m evokernel.cli`: the `evokernel` command."""

import sys

from evokernel.cli import main

sys.exit(main())
