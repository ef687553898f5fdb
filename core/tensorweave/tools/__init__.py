"""Command-line tools (``tensorweave plugins|devices|doctor``)."""
