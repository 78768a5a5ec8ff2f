"""Token vocabularies shared by self-pretraining and finetuning.

Every vocabulary starts with the same four special ids, so a checkpoint pretrained with the masked or causal
objective and the classifier finetuned from it agree on what the mask and the padding are (docs/data.md §6). Content
tokens start at id 4, in a fixed order that must never change between the two phases.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

PAD_ID = 0
MASK_ID = 1
EOS_ID = 2
UNK_ID = 3
NUM_SPECIAL_TOKENS = 4
SPECIAL_TOKENS = ("<pad>", "<mask>", "<eos>", "<unk>")

LISTOPS_SYMBOLS = (*(str(d) for d in range(10)), "[MIN", "[MAX", "[MED", "[SM", "]")
DIGITS_NUM_LEVELS = 17  # sklearn's load_digits: counts of set pixels in 4x4 blocks of a 32x32 bitmap, 0..16


class Vocabulary:
    """A fixed list of content symbols after the four special tokens.

    Args:
        symbols: the content symbols; symbol ``symbols[i]`` gets id ``4 + i``.
        name: a short name written into configs and error messages.
    """

    def __init__(self, symbols: Sequence[str], name: str) -> None:
        if len(set(symbols)) != len(symbols):
            raise ValueError(f"vocabulary {name!r} has duplicate symbols")
        self.name = name
        self.symbols = tuple(symbols)
        self._ids = {s: i + NUM_SPECIAL_TOKENS for i, s in enumerate(self.symbols)}

    def __len__(self) -> int:
        return NUM_SPECIAL_TOKENS + len(self.symbols)

    def __repr__(self) -> str:
        return f"Vocabulary(name={self.name!r}, size={len(self)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and other.symbols == self.symbols

    def __hash__(self) -> int:
        return hash(self.symbols)

    def token_to_id(self, token: str) -> int:
        """The id of one symbol; raises ``KeyError`` naming the symbol when it is not in the vocabulary."""
        try:
            return self._ids[token]
        except KeyError:
            raise KeyError(f"symbol {token!r} is not in the {self.name} vocabulary {self.symbols}") from None

    def encode(self, tokens: Iterable[str], unknown_ok: bool = False) -> list[int]:
        """Ids of a sequence of symbols; unknown symbols raise unless ``unknown_ok`` (then they map to UNK)."""
        if unknown_ok:
            return [self._ids.get(t, UNK_ID) for t in tokens]
        return [self.token_to_id(t) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Symbols of a sequence of ids (special ids become ``<pad>``, ``<mask>``, ``<eos>``, ``<unk>``)."""
        out = []
        for i in ids:
            i = int(i)
            if 0 <= i < NUM_SPECIAL_TOKENS:
                out.append(SPECIAL_TOKENS[i])
            elif i < len(self):
                out.append(self.symbols[i - NUM_SPECIAL_TOKENS])
            else:
                raise ValueError(f"id {i} is outside the {self.name} vocabulary of size {len(self)}")
        return out

    def special_token_ids(self) -> dict[str, int]:
        """The special ids in the form a model config takes (``pad_token_id`` etc.)."""
        return special_token_ids()


class ByteVocabulary(Vocabulary):
    """UTF-8 bytes as tokens (LRA Text and Retrieval): byte ``b`` has id ``4 + b``; size 260."""

    def __init__(self) -> None:
        super().__init__([f"<0x{b:02X}>" for b in range(256)], name="bytes")

    def encode_text(self, text: str, max_tokens: int | None = None) -> list[int]:
        """Ids of the UTF-8 bytes of ``text``, truncated to ``max_tokens`` bytes."""
        data = text.encode("utf-8")
        if max_tokens is not None:
            data = data[:max_tokens]
        return [b + NUM_SPECIAL_TOKENS for b in data]

    def decode_text(self, ids: Iterable[int]) -> str:
        """The text of content ids; special ids are dropped, broken UTF-8 is replaced."""
        data = bytes(int(i) - NUM_SPECIAL_TOKENS for i in ids if int(i) >= NUM_SPECIAL_TOKENS)
        return data.decode("utf-8", errors="replace")


def special_token_ids() -> dict[str, int]:
    """The special ids shared by every vocabulary, keyed as in a transformers config."""
    return {"pad_token_id": PAD_ID, "mask_token_id": MASK_ID, "eos_token_id": EOS_ID, "unk_token_id": UNK_ID}


BYTE_VOCAB = ByteVocabulary()
LISTOPS_VOCAB = Vocabulary(LISTOPS_SYMBOLS, name="listops")
DIGITS_VOCAB = Vocabulary([str(v) for v in range(DIGITS_NUM_LEVELS)], name="digits")


def tokenize_listops(source: str) -> list[str]:
    """LRA's ListOps tokenisation: drop ``(`` and ``)``, keep ``]``, split on whitespace."""
    return source.replace("(", " ").replace(")", " ").split()
