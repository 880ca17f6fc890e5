from tokenstep.cli import main

raise SystemExit(main())
