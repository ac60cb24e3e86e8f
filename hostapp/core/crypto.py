"""Secrets at rest.

Every configured secret (a stdio server's ``env``, an HTTP server's ``headers``) and every
OAuth credential is stored encrypted with Fernet (AES-128-CBC + HMAC-SHA256) under the keys
of ``PATCHBAY_ENCRYPTION_KEY``: the first key encrypts, any of them decrypts, so a key is
rotated by putting the new one first and re-encrypting (``manage.py mcp secrets rotate``).

In the database an encrypted value is text: ``enc:v1:`` and the Fernet token. Reading a
value that is not in that form (a row written before encryption) still works, so a
migration can re-encrypt in place.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import models
from django.forms import JSONField as JSONFormField

PREFIX = "enc:v1:"


class SecretUnreadable(Exception):
    """An encrypted value that none of the configured keys opens."""


@lru_cache(maxsize=4)
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    if not keys:
        raise SecretUnreadable("no encryption key is configured (PATCHBAY_ENCRYPTION_KEY)")
    return MultiFernet([Fernet(k.encode()) for k in keys])


def fernet() -> MultiFernet:
    return _fernet(tuple(settings.PATCHBAY_ENCRYPTION_KEYS))


def new_key() -> str:
    return Fernet.generate_key().decode()


def is_encrypted(value: str | None) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def encrypt(plain: str) -> str:
    return PREFIX + fernet().encrypt(plain.encode()).decode()


def decrypt(stored: str) -> str:
    if not is_encrypted(stored):
        return stored  # written before encryption: the next save encrypts it
    try:
        return fernet().decrypt(stored[len(PREFIX) :].encode()).decode()
    except InvalidToken:
        raise SecretUnreadable(
            "a stored secret cannot be decrypted with any key in PATCHBAY_ENCRYPTION_KEY "
            "(was the key changed without keeping the old one?)"
        ) from None


def rotate(stored: str) -> str:
    """The same secret encrypted under the first key."""
    if not is_encrypted(stored):
        return encrypt(stored)
    try:
        return PREFIX + fernet().rotate(stored[len(PREFIX) :].encode()).decode()
    except InvalidToken:
        raise SecretUnreadable("a stored secret cannot be decrypted with any key in PATCHBAY_ENCRYPTION_KEY") from None


class EncryptedJSONField(models.TextField):
    """A JSON value (a dict of secrets, a token set) kept encrypted in a text column."""

    # What django-stubs reads as the attribute's types: any JSON value, as for a JSONField
    # (else those of the TextField it is stored as, str).
    _pyi_private_set_type: Any
    _pyi_private_get_type: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("blank", True)
        super().__init__(*args, **kwargs)

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        if value is None or value == "":
            return self._empty()
        return json.loads(decrypt(value))

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(decrypt(value)) if value else self._empty()
        return value

    def get_prep_value(self, value: Any) -> str | None:
        if value is None:
            return None if self.null else encrypt("null")
        return encrypt(json.dumps(value, separators=(",", ":"), sort_keys=True))

    def value_to_string(self, obj: Any) -> str:
        # Serialization (dumpdata) carries the encrypted form, never the clear one.
        return self.get_prep_value(self.value_from_object(obj)) or ""

    def _empty(self) -> Any:
        default = self.get_default()
        return default

    def formfield(self, **kwargs: Any) -> Any:
        return JSONFormField(**{"required": not self.blank, **kwargs})


class EncryptedTextField(models.TextField):
    """A short secret (a client secret, an authorization code) kept encrypted."""

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        if value is None or value == "":
            return value
        return decrypt(value)

    def get_prep_value(self, value: Any) -> str | None:
        if value is None or value == "":
            return value
        return encrypt(str(value))

    def value_to_string(self, obj: Any) -> str:
        return self.get_prep_value(self.value_from_object(obj)) or ""
