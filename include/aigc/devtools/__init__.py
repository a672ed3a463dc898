"""Development helpers (a local S3 server); they need the ``dev`` extras, never used by stages."""
