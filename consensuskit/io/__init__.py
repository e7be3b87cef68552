"""Files: saved estimators (``persistence``), resumable fits (``checkpoint``) and the CLI's
label and feature tables (``label_files``)."""
