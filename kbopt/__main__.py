import sys

from kbopt.cli import main

sys.exit(main())
