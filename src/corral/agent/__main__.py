from corral.agent.cli import exit_now, main

exit_now(main())
