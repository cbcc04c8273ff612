"""``python -m archsim``: the same command line as the ``archsim`` script."""
import sys

from archsim.cli import main

sys.exit(main())
