"""Alert rules, their alerts, and what their evaluation remembers (docs/alerts.md). The
default rules are made by ``scheduling.services.alerts.ensure_default_rules`` on first use."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0009_usage_records"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='AlertRule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100, unique=True)),
                ('metric', models.CharField(choices=[('gpu_memory', 'GPU memory use (%)'), ('gpu_utilisation', 'GPU compute utilisation (%)'), ('gpu_temperature', 'GPU temperature (°C)'), ('gpu_xid_errors', 'GPU XID errors (in the last report)'), ('node_silence', "Seconds since the node's last heartbeat"), ('rack_power', 'Rack power draw (% of its budget)'), ('pool_usage', 'Pool usage (% of GPU capacity)'), ('queue_length', 'Waiting requests')], max_length=30)),
                ('scope', models.CharField(choices=[('gpu', 'Each GPU'), ('node', 'Each node'), ('rack', 'Each rack'), ('pool', 'The pool')], max_length=10)),
                ('warning', models.FloatField(blank=True, help_text='Raise at or above this.', null=True)),
                ('critical', models.FloatField(blank=True, help_text='Escalate at or above this.', null=True)),
                ('recovery', models.FloatField(blank=True, help_text='Resolve below this; blank: a person resolves it.', null=True)),
                ('sustained_minutes', models.PositiveIntegerField(default=0, help_text='Raise only after the value stayed at the level this long.')),
                ('enabled', models.BooleanField(default=True)),
                ('extra_recipients', models.JSONField(blank=True, default=list, help_text='E-mail addresses told besides the admins.')),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'ordering': ['metric', 'scope', 'name'],
            },
        ),
        migrations.CreateModel(
            name='Alert',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('subject', models.CharField(help_text='gpu:<uuid>, node:<host>, rack:<name>', max_length=200)),
                ('level', models.CharField(choices=[('warning', 'Warning'), ('critical', 'Critical')], max_length=10)),
                ('state', models.CharField(choices=[('firing', 'Firing'), ('acknowledged', 'Acknowledged'), ('resolved', 'Resolved')], default='firing', max_length=15)),
                ('value', models.FloatField(blank=True, help_text='The latest value seen.', null=True)),
                ('raised_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                ('escalated_at', models.DateTimeField(blank=True, null=True)),
                ('acknowledged_at', models.DateTimeField(blank=True, null=True)),
                ('resolved_at', models.DateTimeField(blank=True, null=True)),
                ('acknowledged_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('resolved_by', models.ForeignKey(blank=True, help_text='Empty on a resolved alert: it recovered by itself.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('rule', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='alerts', to='scheduling.alertrule')),
            ],
            options={
                'ordering': ['-raised_at', '-pk'],
                'constraints': [models.UniqueConstraint(condition=models.Q(('state__in', ['firing', 'acknowledged'])), fields=('rule', 'subject'), name='one_open_alert_per_rule_subject')],
            },
        ),
        migrations.CreateModel(
            name='AlertTrack',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('subject', models.CharField(max_length=200)),
                ('breach_since', models.DateTimeField(blank=True, null=True)),
                ('armed', models.BooleanField(default=True)),
                ('rule', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='tracks', to='scheduling.alertrule')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('rule', 'subject'), name='one_track_per_rule_subject')],
            },
        ),
    ]
