"""``python -m envbuild``: the same command line as the ``envbuild`` script (``cli.main``)."""

from envbuild.cli import main

raise SystemExit(main())
