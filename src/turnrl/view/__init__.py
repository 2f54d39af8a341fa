"""See what was trained: trajectory records, the browser viewer (``turnrl view``), W&B logging."""
