"""Test helpers and (later) the device conformance kit, a pytest plugin."""
