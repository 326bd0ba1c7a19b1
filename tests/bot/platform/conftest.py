"""The engine and its hub, for the platform layer's scenarios that need a real one."""

from tests.engine.hub.conftest import (  # noqa: F401 (fixtures)
    app_config,
    engine,
    hub,
    hub_config,
    manual_sleep,
    model,
)
