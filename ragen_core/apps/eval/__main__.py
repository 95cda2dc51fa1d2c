"""``python -m ragen_core.apps.eval`` is ``ragen eval``."""

import sys

from ragen_core.apps.eval.cli import main

sys.exit(main())
