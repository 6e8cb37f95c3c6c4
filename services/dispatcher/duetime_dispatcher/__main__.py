"""``python -m duetime_dispatcher``: run the dispatcher in the foreground."""

from duetime_dispatcher.service import main

raise SystemExit(main())
