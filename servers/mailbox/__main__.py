"""`python -m servers.mailbox [--transport {stdio,http}] [--port N] [--data-dir DIR]`."""

from servers.mailbox import main

main()
