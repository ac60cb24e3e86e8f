"""Prepare a data directory for the security suite's host, before `manage.py run` starts.

Usage: ``python -m tests.security.seed CONFIG.json`` with PATCHBAY_DATA_DIR (and the rest
of the host's environment) set. Migrates, creates the administrator, imports the servers of
CONFIG.json as `manage.py mcp import --refresh` does, creates an agent token, and prints
``{"token": ...}`` as its last line.
"""

from __future__ import annotations

import json
import os
import sys

ADMIN = ("admin", "admin-sec-password-1")
AGENT = "sec-agent"


def main(config: str) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostapp.settings")
    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from hostapp.catalog.pool import close_pool
    from hostapp.gateway.tokens import create_token

    call_command("migrate", interactive=False, verbosity=0)
    User.objects.create_superuser(ADMIN[0], "admin@example.com", ADMIN[1])
    try:
        call_command("mcp", "import", config, "--refresh")
    finally:
        close_pool()
    _, token = create_token(AGENT)
    sys.stdout.write(json.dumps({"token": token}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
