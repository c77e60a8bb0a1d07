"""Multi-token prediction (``mtp``): the target's own prediction layers draft; nothing to
load beside it."""

from __future__ import annotations

from harness.checks import model_config
from harness.errors import ConfigError
from harness.speculators.base import Speculator


def check_mtp(target: str) -> None:
    """The target's config.json must declare multi-token-prediction layers
    (``num_nextn_predict_layers``, ``mtp_num_hidden_layers`` and the like); skipped when it
    is not on disk."""
    config = model_config(target)
    if config is None:
        return
    text = config.get("text_config") or {}
    declared = [v for c in (config, text) for k, v in c.items()
                if ("nextn_predict" in k or k.startswith("mtp_")) and isinstance(v, int)]  # fmt: skip
    if not any(v > 0 for v in declared):
        raise ConfigError(
            f"variant.method=mtp: target {target} declares no multi-token-prediction layers "
            "(num_nextn_predict_layers or mtp_* in its config.json); use another method"
        )


class Mtp(Speculator):
    method = "mtp"
    what = "the target's own multi-token-prediction layers"
    loads_checkpoint = False
    drafts_every_step = False  # as calibrated before: steps without drafts timed apart

    def plan_check(
        self, target: str, draft: str | None, target_config: dict | None = None
    ) -> str | None:
        check_mtp(target)
        return "the target declares multi-token-prediction layers (or its config is not on disk)"

    def check(self, target: str, draft: str | None) -> None:
        check_mtp(target)


FAMILY = Mtp()
