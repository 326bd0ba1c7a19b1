"""The API provider registry: OpenAI-compatible servers an owner adds while the service
runs, and what each serves (chat, embeddings, transcription, speech).

The face of the package: ``Provider`` (checked from what a person typed), ``ProviderStore``
(the table), ``ProviderRegistry`` (changes announced on the SystemEventBus, other
processes' changes noticed by ``watch``), ``ServiceChoice`` (which ``Endpoint`` does a job
now: a provider serving it, else the settings'; followed on the bus) and ``probe``
(``chathub providers test``).
"""

from providers.choice import Endpoint, ServiceChoice
from providers.registry import ProviderRegistry, follow_providers, probe
from providers.store import SERVICES, UNSENDABLE, Provider, ProviderError, ProviderStore, masked

__all__ = [
    "SERVICES",
    "UNSENDABLE",
    "Endpoint",
    "Provider",
    "ProviderError",
    "ProviderRegistry",
    "ProviderStore",
    "ServiceChoice",
    "follow_providers",
    "masked",
    "probe",
]
