"""``python -m cli``: the ``kvcompass`` command without the console script."""

import sys

from cli.main import main

sys.exit(main())
