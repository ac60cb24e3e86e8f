"""One UPDATE for many rows, each to values of its own."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import Case, F, Model, QuerySet, Value, When
from django.db.models.functions import Cast


def update_each(queryset: QuerySet[Any], key: str, rows: dict[Any, dict[str, Any]]) -> int:
    """One UPDATE of the rows of `queryset`, each (found by its `key` value) to its own values;
    how many rows it changed.

    A field given the same value for every row is set plainly; otherwise it is a CASE on the
    key, and a row given no value for it keeps its own. (`bulk_update` needs model instances
    and writes every field as a CASE, whatever it holds.)
    """
    model: type[Model] = queryset.model
    names = list(dict.fromkeys(name for values in rows.values() for name in values))
    changes: dict[str, Any] = {}
    for name in names:
        given = [(k, values[name]) for k, values in rows.items() if name in values]
        first = given[0][1]
        if len(given) == len(rows) and all(value == first for _, value in given[1:]):
            changes[name] = first
            continue
        field = model._meta.get_field(name)
        whens = [When(**{key: k}, then=_expression(value, field)) for k, value in given]
        case: Any = Case(*whens, default=F(name), output_field=field)  # type: ignore[arg-type]
        if connection.features.requires_casted_case_in_updates:
            case = Cast(case, output_field=field)  # type: ignore[arg-type]
        changes[name] = case
    return queryset.update(**changes)


def _expression(value: Any, field: Any) -> Any:
    if hasattr(value, "resolve_expression"):
        return value
    if value is None:
        return Value(None)  # SQL NULL, as saving None stores it (a JSON field's too, not JSON null)
    return Value(value, output_field=field)
