"""The admin console's URLs (``/console/``), admins only: every page of portal/console/."""

from __future__ import annotations

from django.urls import URLPattern, path

from portal.console import course_folders, history, idle, ops, overview, pool, prices, queue
from portal.console.gpu_cordon import gpu_action

urlpatterns: list[URLPattern] = [
    path("", overview.overview, name="console"),
    # idle desktops (docs/lifecycle.md)
    path("idle/", idle.idle, name="console-idle"),
    path("idle/hours/", idle.hours, name="console-idle-hours"),
    path("idle/policies/", idle.policies, name="console-idle-policies"),
    path("idle/policies/<int:policy_id>/", idle.policy_edit, name="console-idle-policy-edit"),
    path(
        "idle/policies/<int:policy_id>/delete/",
        idle.policy_delete,
        name="console-idle-policy-delete",
    ),
    # the pool: nodes, join tokens
    path("pool/", pool.pool, name="console-pool"),
    path("pool/fragment/", pool.pool_fragment, name="console-pool-fragment"),
    path("pool/nodes/", pool.node_action, name="console-pool-node-action"),
    path("pool/gpus/<int:gpu_id>/", gpu_action, name="console-pool-gpu-action"),
    path("pool/tokens/", pool.create_token, name="console-pool-token-create"),
    path("pool/tokens/<int:token_id>/revoke/", pool.revoke_token, name="console-pool-token-revoke"),
    # the queue, quotas and desktop profiles
    path("queue/", queue.queue, name="console-queue"),
    path("queue/fragment/", queue.queue_fragment, name="console-queue-fragment"),
    path("queue/<int:session_id>/cancel/", queue.queue_cancel, name="console-queue-cancel"),
    path("queue/<int:session_id>/boost/", queue.queue_boost, name="console-queue-boost"),
    path("quotas/", queue.quotas, name="console-quotas"),
    path("quotas/grant-cap/", queue.grant_cap, name="console-quota-grant-cap"),
    path("quotas/<int:quota_id>/", queue.quota_edit, name="console-quota-edit"),
    path("quotas/<int:quota_id>/delete/", queue.quota_delete, name="console-quota-delete"),
    path("profiles/", queue.profiles, name="console-profiles"),
    path("profiles/<int:profile_id>/", queue.profile_edit, name="console-profile-edit"),
    path(
        "profiles/<int:profile_id>/deactivate/",
        queue.profile_deactivate,
        name="console-profile-deactivate",
    ),
    # alerts, reports and the audit trail
    path("alerts/", ops.alerts, name="console-alerts"),
    path("alerts/fragment/", ops.alerts_fragment, name="console-alerts-fragment"),
    path(
        "alerts/<int:alert_id>/acknowledge/",
        ops.alert_acknowledge,
        name="console-alert-acknowledge",
    ),
    path("alerts/<int:alert_id>/resolve/", ops.alert_resolve, name="console-alert-resolve"),
    path("alerts/rules/new/", ops.alert_rule, name="console-alert-rule-new"),
    path("alerts/rules/<int:rule_id>/", ops.alert_rule, name="console-alert-rule"),
    path("reports/", ops.reports, name="console-reports"),
    path("reports/close/", prices.report_close, name="console-report-close"),
    # the price list (docs/accounting.md)
    path("prices/", prices.prices, name="console-prices"),
    path("prices/<int:rule_id>/", prices.price_correct, name="console-price-correct"),
    path("prices/<int:rule_id>/end/", prices.price_end, name="console-price-end"),
    # course folders' caps (docs/course-files.md)
    path("course-folders/", course_folders.course_folders, name="console-course-folders"),
    path(
        "course-folders/<int:course_id>/cap/",
        course_folders.course_folder_cap,
        name="console-course-folder-cap",
    ),
    path("history/", history.history, name="console-history"),
    path("audit/", ops.audit, name="console-audit"),
]
