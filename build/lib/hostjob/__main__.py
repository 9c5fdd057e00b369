from __future__ import annotations

import sys

from hostjob.cli.main import main

sys.exit(main())
