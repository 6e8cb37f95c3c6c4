from duetime_planner.service import main

raise SystemExit(main())
