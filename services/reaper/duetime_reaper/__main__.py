from duetime_reaper.service import main

raise SystemExit(main())
