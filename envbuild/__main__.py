from envbuild.cli import main

raise SystemExit(main())
