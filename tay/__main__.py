"""``python -m tay``: the ``tay`` command (``tay serve``, ``tay storage ...``); the
dedicated worker is ``tay-worker`` or ``python -m tay.worker``."""

import sys

from tay.cli import main

sys.exit(main())
