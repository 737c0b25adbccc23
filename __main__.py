from anydev.cli import main

raise SystemExit(main())
