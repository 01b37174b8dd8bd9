"""`python -m gateway` runs the CLI."""

from gateway.cli import main

raise SystemExit(main())
