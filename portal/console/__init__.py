"""The admin console (``/console/``), admins only: pool, queue, quotas, profiles, alerts,
idle desktops, reports and the audit trail."""
