from duetime_api.service import main

raise SystemExit(main())
