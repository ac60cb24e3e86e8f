from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("servers/", views.server_list, name="servers"),
    path("servers/add/", views.server_add, name="server_add"),
    path("servers/import/", views.server_import, name="server_import"),
    path("servers/refresh/", views.server_refresh_all, name="server_refresh_all"),
    path("servers/<slug:name>/", views.server_detail, name="server"),
    path("servers/<slug:name>/refresh/", views.server_refresh, name="server_refresh"),
    path("servers/<slug:name>/review/", views.server_review, name="server_review"),
    path("servers/<slug:name>/enable/", views.server_enable, name="server_enable"),
    path("servers/<slug:name>/delete/", views.server_delete, name="server_delete"),
    path("catalog/", views.catalog, name="catalog"),
    # Before the tools' pages: a tool's exposed name always holds "__", these never do. A
    # resource or a template is known by its row (its URI may hold anything).
    path("catalog/prompts/", views.prompt_list, name="prompts"),
    path("catalog/prompts/<str:exposed_name>/", views.prompt_detail, name="prompt"),
    path("catalog/prompts/<str:exposed_name>/accept/", views.prompt_accept, name="prompt_accept"),
    path("catalog/resources/", views.resource_list, name="resources"),
    path("catalog/resources/<int:object_id>/", views.resource_detail, name="resource"),
    path("catalog/templates/", views.template_list, name="resource_templates"),
    path("catalog/templates/<int:object_id>/", views.template_detail, name="resource_template"),
    path("catalog/templates/<int:object_id>/accept/", views.template_accept, name="resource_template_accept"),
    path("catalog/<str:exposed_name>/", views.tool_detail, name="tool"),
    path("catalog/<str:exposed_name>/accept/", views.tool_accept, name="tool_accept"),
    path("catalog/<str:exposed_name>/class/", views.tool_class, name="tool_class"),
    path("catalog/<str:exposed_name>/for-agents/", views.tool_override, name="tool_override"),
]
