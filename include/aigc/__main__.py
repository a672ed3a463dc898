from aigc.cli import main

raise SystemExit(main())
