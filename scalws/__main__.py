import sys

from scalws.cli import scalwsd_main

sys.exit(scalwsd_main())
