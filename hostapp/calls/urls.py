from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("calls/", views.call_list, name="calls"),
    path("calls/pending/", views.pending, name="pending"),
    path("calls/inputs/", views.input_queue, name="inputs"),
    path("calls/inputs/<int:input_id>/", views.input_detail, name="input"),
    path("calls/suggestions/", views.suggestions, name="suggestions"),
    path("calls/reads/", views.read_list, name="reads"),
    path("calls/<int:call_id>/", views.call_detail, name="call"),
    path("calls/<int:call_id>/result.json", views.call_result_download, name="call_result"),
    path("calls/<int:call_id>/approve/", views.approve, name="call_approve"),
    path("calls/<int:call_id>/deny/", views.deny, name="call_deny"),
    path("calls/<int:call_id>/reopen/", views.reopen, name="call_reopen"),
    path("catalog/<str:exposed_name>/call/", views.call_tool, name="tool_call"),
]
