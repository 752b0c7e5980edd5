"""
Language models: tokenizers, generation, chat.
"""
from __future__ import annotations
import meganeura._core
import os
import typing
__all__ = ['Conversation', 'LanguageModel', 'Tokenizer']
class Conversation:
    """
    A chat with a batch-1 LanguageModel that keeps its KV cache across turns (a turn runs only its new tokens).
    """
    def __init__(self, model: LanguageModel, system: str = '') -> None:
        ...
    def reply(self, user: str, *, max_new_tokens: int = 0, temperature: float | None = None, top_k: int | None = None, top_p: float | None = None, seed: int = 0) -> str:
        """
        The reply to `user`'s message.
        """
    def reset(self) -> None:
        ...
    @property
    def cached_tokens(self) -> int:
        ...
    @property
    def last_turn_new_tokens(self) -> int:
        ...
    @property
    def messages(self) -> list:
        ...
class LanguageModel:
    """
    A Hugging Face causal LM (Llama, Qwen2, Qwen3 directories) on a device, with a KV cache for `batch` sequences.
    """
    def __init__(self, dir: os.PathLike, *, dtype: typing.Any = meganeura._core.DType.f32, precision: typing.Any = meganeura._core.DType.f32, device: str = '', batch: int = 1, max_context: int = 0, adapter: os.PathLike | None = None, decode_chain: int = 0) -> None:
        """
        max_context 0: the model's, at most 2048; adapter: a PEFT LoRA directory merged into the weights; decode_chain: decode steps in one GPU submission (0: 8, 1: one a token).
        """
    def generate(self, prompts: typing.Any, *, max_new_tokens: int = 0, temperature: float | None = None, top_k: int | None = None, top_p: float | None = None, seed: int = 0, stop: list[str] = [], chat: bool = False, system: str | None = None, on_text: typing.Any = None) -> typing.Any:
        """
        Continues a prompt (text or token ids; a list of them runs as one batch): {'text', 'tokens', 'finish'} per prompt. Sampling left unset follows generation_config.json; on_text(index, text) receives the text as it is final.
        """
    @property
    def architecture(self) -> str:
        ...
    @property
    def batch(self) -> int:
        ...
    @property
    def device_name(self) -> str:
        ...
    @property
    def last_stats(self) -> dict:
        ...
    @property
    def max_context(self) -> int:
        ...
    @property
    def tokenizer(self) -> Tokenizer:
        ...
class Tokenizer:
    """
    A Hugging Face tokenizer.json (byte-level BPE).
    """
    @staticmethod
    def from_dir(dir: os.PathLike) -> Tokenizer:
        """
        tokenizer.json and tokenizer_config.json of a model directory.
        """
    @staticmethod
    def from_file(tokenizer_json: os.PathLike, config: os.PathLike | None = None) -> Tokenizer:
        ...
    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        ...
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ...
    def encode_chat(self, messages: typing.Any, add_generation_prompt: bool = True) -> list[int]:
        ...
    def format_chat(self, messages: typing.Any, add_generation_prompt: bool = True) -> str:
        """
        The chat template's text (ChatML or Llama 3) of [{'role', 'content'}, ...].
        """
    def token(self, id: int) -> str | None:
        ...
    def token_id(self, token: str) -> int | None:
        ...
    @property
    def bos_id(self) -> int | None:
        ...
    @property
    def eos_id(self) -> int | None:
        ...
    @property
    def pad_id(self) -> int | None:
        ...
    @property
    def stop_ids(self) -> list[int]:
        ...
    @property
    def vocab_size(self) -> int:
        ...
