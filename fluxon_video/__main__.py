from fluxon_video.cli import main

raise SystemExit(main())
