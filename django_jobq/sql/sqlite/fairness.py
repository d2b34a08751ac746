"""SQLite: fair queues are not available (Capabilities.fair_queues; a system check names a FAIR queue)."""

from ..engine import Unsupported

_FAIR = ("fair_queues", 'JOBQ["QUEUES"][...]["FAIR"]')
CLAIM_FAIR = Unsupported(*_FAIR)
COMPLETE_AND_CLAIM_FAIR = Unsupported(*_FAIR)
COMPLETE_AND_CLAIM_FAIR_CAPPED = Unsupported(*_FAIR)
COMPLETE_AND_CLAIM_FAIR_TASK_CAPS = Unsupported(*_FAIR)
COMPLETE_AND_CLAIM_FAIR_CAPPED_TASK_CAPS = Unsupported(*_FAIR)
FAIR_PRUNE_LOCK = Unsupported(*_FAIR)
FAIR_PRUNE = Unsupported(*_FAIR)
