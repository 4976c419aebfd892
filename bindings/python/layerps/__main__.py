"""``python -m layerps`` is ``python -m layerps.launch``."""

import sys

from .launch import main

sys.exit(main())
