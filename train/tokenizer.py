"""A byte-level BPE tokenizer trained locally, with a ChatML chat template.

Digits are split one by one (so arithmetic is done digit by digit, as in Qwen2), but
unlike Qwen2 a number's leading space stays on its first digit (`` 15`` -> `` 1`` ``5``):
a separate space token before every number makes the tokens in front of all numbers
identical, and a tiny model then cannot find which number to copy. The special tokens
are ChatML's, ``<|im_end|>`` ends an assistant turn (eos) and ``<|endoftext|>`` pads. Saved as a ``PreTrainedTokenizerFast`` directory that
transformers, TRL and vLLM load.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END)

# Qwen2's split pattern (words with a leading space, single digits, punctuation runs),
# except that a digit keeps one leading space.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+| ?\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train byte-level BPE on ``texts`` (``vocab_size`` includes bytes and specials)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )


def build_tokenizer(
    texts: Iterable[str], vocab_size: int, out_dir: str | Path
) -> PreTrainedTokenizerFast:
    """Train a tokenizer on ``texts`` and save it to ``out_dir``."""
    tokenizer = train_tokenizer(texts, vocab_size)
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer
