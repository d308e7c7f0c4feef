"""``python -m llmplan.cli``: the same entry point as the ``llmplan`` script."""

import sys

from llmplan.cli.main import main

sys.exit(main())
