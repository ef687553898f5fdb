"""The client layer: ``tw.Session`` and the execution plans it builds and runs."""
