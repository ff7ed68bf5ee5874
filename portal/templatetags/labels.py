"""Words for codes in templates (scheduling.labels): ``{{ event.kind|audit_label }}``,
``{{ event.data|detail_rows }}``, ``{{ f.s.slice|slices_label }}``, ``{{ kind|kind_label }}``."""

from __future__ import annotations

from django import template

from scheduling import labels

register = template.Library()

register.filter("audit_label", labels.audit_label)
register.filter("detail_rows", labels.detail_rows)
register.filter("slices_label", labels.slices_label)
register.filter("kind_label", labels.kind_label)
register.filter("slice_words", labels.slice_words)
register.filter("rule_name", labels.rule_name)
register.filter("subject_label", labels.subject_label)
register.filter("cordon_causes", labels.cordon_causes)
