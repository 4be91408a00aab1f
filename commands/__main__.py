"""`python -m commands`: the `embento` command run from the checkout."""

import sys

from commands import main

sys.exit(main())
