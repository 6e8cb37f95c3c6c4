"""``python -m duetime_workers``: run the worker service."""

import sys

from .service import main

sys.exit(main())
