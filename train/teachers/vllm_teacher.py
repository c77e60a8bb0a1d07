"""A local or Hugging Face model as the teacher, through the harness's vLLM engine cache.

The same prompt templates as the Gemini teacher; every stage is one ``LLM.chat`` call
over all requests (greedy by default). For users without Gemini credit, and for
distillation from a trained target later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.config import EngineConfig
from train.formats import CodBounds
from train.teachers.base import PromptedTeacher, Reply, TeacherPrompts, TeacherRequest


@dataclass
class VllmTeacherConfig:
    """The teacher model and its engine (``vllm.*`` in ``conf/data/common.yaml``)."""

    model: str | None = None  # local model directory or hub id; required for teacher=vllm
    engine: EngineConfig = field(default_factory=EngineConfig)
    max_tokens: int = 1024
    temperature: float = 0.0
    seed: int = 0


def reply_from_output(key: str, output: Any) -> Reply:
    """A ``vllm.RequestOutput`` as a Reply (finish reason ``stop`` or ``length``)."""
    completion = output.outputs[0]
    finish = completion.finish_reason if completion.finish_reason in ("stop", "length") else "error"
    return Reply(
        key,
        completion.text,
        finish,
        error=None if finish != "error" else f"finish_reason {completion.finish_reason}",
        input_tokens=len(output.prompt_token_ids or []),
        output_tokens=len(completion.token_ids),
    )


class VllmTeacher(PromptedTeacher):
    """CoT and CoD from a model served by vLLM in this process."""

    name = "vllm"

    def __init__(self, cfg: VllmTeacherConfig, prompts: TeacherPrompts, bounds: CodBounds) -> None:
        super().__init__(prompts, bounds)
        if not cfg.model:
            raise ValueError("vllm.model=None: set the teacher model (a local directory or hub id)")
        self.cfg = cfg
        self.model = cfg.model

    def engine_spec(self) -> Any:
        """The harness engine spec: the teacher as target, no draft model."""
        from harness.backends.engine import EngineSpec

        return EngineSpec.plain(self.model, asdict(self.cfg.engine))

    def complete(self, requests: Sequence[TeacherRequest], stage: str) -> dict[str, Reply]:
        from vllm import SamplingParams

        from harness.backends import engine

        live, _ = engine.get(self.engine_spec())
        params = SamplingParams(
            temperature=self.cfg.temperature, max_tokens=self.cfg.max_tokens, seed=self.cfg.seed
        )
        outputs = live.llm.chat([r.messages() for r in requests], params, use_tqdm=False)
        return {
            r.key: reply_from_output(r.key, out) for r, out in zip(requests, outputs, strict=True)
        }
