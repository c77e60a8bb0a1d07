"""Studies as code: a study's config (``conf/study/<name>.yaml``), its runner and CLI
(``python -m study <name>``), above both the harness and the reports."""
