"""Simplified Chinese date formats (``FORMAT_MODULE_PATH``): 2026年12月5日 10:42, 12月5日.
Django's own zh_Hans formats fill in the rest."""

SHORT_DATE_FORMAT = "Y年n月j日"
SHORT_DATETIME_FORMAT = "Y年n月j日 H:i"
MONTH_DAY_FORMAT = "n月j日"
