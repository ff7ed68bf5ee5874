"""English date formats (``FORMAT_MODULE_PATH``): the short forms the pages have always shown,
2026-12-05 10:42; Django's own English formats fill in the rest."""

SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
