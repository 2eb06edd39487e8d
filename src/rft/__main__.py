import sys

from rft.cli import main

sys.exit(main())
