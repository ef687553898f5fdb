"""``python -m tensorweave``: the same as the ``tensorweave`` command."""

import sys

from tensorweave.tools.cli import main

sys.exit(main())
