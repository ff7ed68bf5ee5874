"""One admission threshold (issue 39): the "Pool usage" alert rule's warning and critical
levels take the pool policy's ``warn_percent`` and ``block_percent``, which go, with the
policy's ``alert_level`` (the pool's level is the rule's open alert now)."""

from django.db import migrations

POOL_USAGE = "pool_usage"
POOL = "pool"


def policy_levels_into_the_rule(apps, schema_editor):
    PoolPolicy = apps.get_model("scheduling", "PoolPolicy")
    AlertRule = apps.get_model("scheduling", "AlertRule")
    policy = PoolPolicy.objects.order_by("pk").first()
    if policy is None:
        return  # a new pool: its default rules bring the default levels
    warn, block = float(policy.warn_percent), float(policy.block_percent)
    rule = AlertRule.objects.filter(metric=POOL_USAGE, scope=POOL).order_by("pk").first()
    if rule is None:
        # No such rule (none at all yet, or it was deleted): make it now, so that the
        # policy's levels hold rather than the defaults.
        name = "Pool usage"
        if AlertRule.objects.filter(name=name).exists():
            name = "Pool usage (admission)"
        rule = AlertRule(name=name, metric=POOL_USAGE, scope=POOL)
    rule.warning, rule.critical = warn, block
    if rule.pk is None or (rule.recovery is not None and rule.recovery >= warn):
        rule.recovery = max(0.0, warn - 10.0)  # below the warning level, as rules must be
    rule.save()


def rule_levels_into_the_policy(apps, schema_editor):
    PoolPolicy = apps.get_model("scheduling", "PoolPolicy")
    AlertRule = apps.get_model("scheduling", "AlertRule")
    rule = AlertRule.objects.filter(metric=POOL_USAGE, scope=POOL).order_by("pk").first()
    if rule is None:
        return
    for policy in PoolPolicy.objects.all():
        if rule.warning is not None:
            policy.warn_percent = round(rule.warning)
        if rule.critical is not None:
            policy.block_percent = round(rule.critical)
        policy.save(update_fields=["warn_percent", "block_percent"])


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0029_course_folders"),
    ]

    operations = [
        migrations.RunPython(policy_levels_into_the_rule, rule_levels_into_the_policy),
        migrations.RemoveField(model_name="poolpolicy", name="warn_percent"),
        migrations.RemoveField(model_name="poolpolicy", name="block_percent"),
        migrations.RemoveField(model_name="poolpolicy", name="alert_level"),
    ]
