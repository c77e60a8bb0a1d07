"""Supervised fine-tuning with TRL's ``SFTTrainer``: a LoRA adapter or every weight.

Rows are TRL's prompt-completion format, conversational (``{"prompt": [system, user],
"completion": [assistant]}``) or plain text (pretraining); the loss is on the completion
only. Checkpoints go to a work directory and an interrupted run resumes from the last
one. A full run saves a standalone model directory vLLM can load; a LoRA run saves the
adapter, which :func:`train.merge.merge_lora` folds into the base (``train.build`` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness import console
from train.config import SFTSettings, TrainConfig
from train.loading import load_model


@dataclass(frozen=True)
class SFTResult:
    """What a finished run reports: optimiser steps, last logged loss, validation loss."""

    steps: int
    final_loss: float
    eval_loss: float | None
    train_seconds: float


def sft(
    base_dir: str | Path,
    rows: list[dict],
    out_dir: str | Path,
    settings: SFTSettings,
    cfg: TrainConfig,
    work_dir: str | Path,
    val_rows: list[dict] | None = None,
    vocab_size: int | None = None,
    teacher_dir: str | Path | None = None,
) -> SFTResult:
    """Fine-tune the model in ``base_dir`` on ``rows`` and save what was trained to ``out_dir``.

    With ``settings.lora`` only the adapter is trained and ``out_dir`` is a PEFT adapter
    directory (merge it with :func:`train.merge.merge_lora`); otherwise every weight is
    trained and ``out_dir`` is a standalone model with its tokenizer. ``vocab_size`` pads
    the embeddings first (a draft must match its target's, e.g. Qwen2.5-0.5B's 151936
    rows against Qwen2.5-14B's 152064; the padding ids are never in the data).
    ``settings.freeze_embeddings`` trains everything but the input embeddings (and the
    LM head tied to them).
    ``settings.objective`` ``kl`` trains on the forward KL from the next-token
    distributions of the model in ``teacher_dir`` (:func:`forward_kl`) instead of the
    cross-entropy of the completion tokens.
    """
    import time

    from datasets import Dataset
    from transformers import AutoTokenizer
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTTrainer

    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    model = load_model(base_dir, cfg)
    if vocab_size and vocab_size != model.config.vocab_size:
        model.resize_token_embeddings(vocab_size)
    if settings.freeze_embeddings:  # a tied LM head shares the weight, so it stays too
        model.get_input_embeddings().requires_grad_(False)
    trainer_cls, extra = SFTTrainer, {}
    if settings.objective == "kl":
        if teacher_dir is None:
            raise ValueError("objective kl needs a teacher model")
        trainer_cls, extra = _kl_trainer(), {"teacher": load_model(teacher_dir, cfg)}
    trainer = trainer_cls(
        model=model,
        args=_sft_config(settings, cfg, work),
        train_dataset=_dataset(Dataset, rows),
        eval_dataset=_dataset(Dataset, val_rows) if val_rows else None,
        processing_class=tokenizer,
        peft_config=_lora_config(settings),
        **extra,
    )
    resume = get_last_checkpoint(str(work)) if any(work.glob("checkpoint-*")) else None
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    seconds = time.perf_counter() - start
    eval_loss = trainer.evaluate()["eval_loss"] if val_rows else None
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    if settings.lora is None:
        trainer.save_model(str(out_dir))
        tokenizer.save_pretrained(str(out_dir))
    else:
        trainer.model.save_pretrained(str(out_dir))
    return SFTResult(
        trainer.state.global_step, float(losses[-1]) if losses else float("nan"), eval_loss, seconds
    )


def forward_kl(teacher_logits, student_logits, mask, num_items=None):
    """KL(teacher || student) between the two next-token distributions, summed over the
    positions where ``mask`` is true and divided by ``num_items`` (default: their count, a
    mean). Logits share a vocabulary; a padded one is cut to the smaller size."""
    import torch
    import torch.nn.functional as F

    vocab = min(teacher_logits.shape[-1], student_logits.shape[-1])
    log_p = F.log_softmax(teacher_logits[..., :vocab].float(), dim=-1)
    log_q = F.log_softmax(student_logits[..., :vocab].float(), dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    mask = mask.to(kl.dtype)
    count = mask.sum() if num_items is None else num_items
    return (kl * mask).sum() / torch.as_tensor(count).clamp(min=1)


def _kl_trainer():
    """``SFTTrainer`` whose loss is :func:`forward_kl` from a frozen teacher on the
    completion tokens (logit distillation, as in DistillSpec, Zhou et al. 2023)."""
    import torch
    from trl import SFTTrainer

    class KLTrainer(SFTTrainer):
        def __init__(self, *args, teacher, **kwargs):
            super().__init__(*args, **kwargs)
            self.teacher = teacher.eval().requires_grad_(False).to(self.model.device)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs["labels"]
            forward = {k: v for k, v in inputs.items() if k != "labels"}
            outputs = model(**forward, use_cache=False)
            with torch.no_grad():
                teacher = self.teacher(**forward, use_cache=False).logits
            # logits at t predict token t + 1: completion tokens are the labels kept. The
            # trainer counts those tokens over the whole accumulated batch and does not
            # divide by the accumulation steps itself, so the sum is divided by that count.
            mask = labels[:, 1:] != -100
            loss = forward_kl(teacher[:, :-1], outputs.logits[:, :-1], mask, num_items_in_batch)
            return (loss, outputs) if return_outputs else loss

    return KLTrainer


def _dataset(dataset_cls, rows: list[dict]):
    """Only the columns TRL reads: prompt and completion."""
    return dataset_cls.from_list(
        [{"prompt": r["prompt"], "completion": r["completion"]} for r in rows]
    )


def _lora_config(settings: SFTSettings):
    if settings.lora is None:
        return None
    from peft import LoraConfig

    lora = settings.lora
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )


def _sft_config(settings: SFTSettings, cfg: TrainConfig, work: Path):
    from trl import SFTConfig

    cuda = cfg.device == "cuda"
    return SFTConfig(
        output_dir=str(work),
        num_train_epochs=settings.epochs,
        max_steps=settings.max_steps,
        per_device_train_batch_size=settings.batch_size,
        per_device_eval_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        learning_rate=settings.learning_rate,
        lr_scheduler_type=settings.scheduler,
        warmup_steps=settings.warmup_ratio,
        weight_decay=settings.weight_decay,
        max_length=settings.max_length,
        completion_only_loss=settings.completion_only_loss,
        train_sampling_strategy="group_by_length",
        logging_steps=settings.logging_steps,
        save_steps=settings.save_steps,
        save_total_limit=1,
        seed=settings.seed,
        use_cpu=not cuda,
        bf16=cuda and cfg.bf16,
        gradient_checkpointing=cuda and cfg.gradient_checkpointing,
        report_to="none",
        dataloader_num_workers=0,
        disable_tqdm=not console.interactive(),  # in a log: a loss line per logging step
    )
