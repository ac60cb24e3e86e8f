"""`python -m servers.tasks [--transport {stdio,http}] [--port N] [--data-dir DIR]`."""

from servers.tasks import main

main()
