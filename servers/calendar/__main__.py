"""`python -m servers.calendar [--transport {stdio,http}] [--port N] [--data-dir DIR]`."""

from servers.calendar import main

main()
