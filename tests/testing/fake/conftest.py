"""``pytest tests/testing/fake --tw-device=FAKE`` runs the conformance kit against the fake
accelerator of ``tensorweave.testing.fake_device``, registered here at run time (only then:
other runs must not see extra devices)."""


def pytest_configure(config):
    device = config.getoption("tw_device", default=None)
    if device and device.upper() == "FAKE":
        from tensorweave.testing.fake_device import register_fake_devices

        register_fake_devices(count=1)
