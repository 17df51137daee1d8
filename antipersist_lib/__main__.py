from antipersist_lib.cli import main

raise SystemExit(main())
