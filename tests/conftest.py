from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.test import Client


@pytest.fixture
def admin_user(db: None) -> User:
    from django.contrib.auth.models import User

    return User.objects.create_superuser("alice", "alice@example.com", "alice-password-1")


@pytest.fixture
def plain_user(db: None) -> User:
    from django.contrib.auth.models import User

    return User.objects.create_user("olivia", "olivia@example.com", "olivia-password-1")


@pytest.fixture
def admin_client(admin_user: User) -> Client:
    from django.test import Client

    client = Client()
    client.force_login(admin_user)
    return client
