"""`python -m engine_adapter.cli`: the `threadline` command."""

import sys

from engine_adapter.cli.main import main

sys.exit(main())
