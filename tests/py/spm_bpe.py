"""An independent SentencePiece-BPE encoder for the tokenizer test vectors of
Gemma 3, written from the algorithm SentencePiece's BPE model and llama.cpp's
"llama" (SPM) vocabulary type define, not from the engine's code:

1. user-defined pieces (GGUF token type 4) are cut out of the text first and
   always become their own token, longest match first;
2. in the rest, spaces become U+2581 (no space prefix when
   tokenizer.ggml.add_space_prefix is false, as for Gemma 3);
3. starting from single characters, the adjacent pair whose concatenation
   is the vocabulary piece with the highest score merges, leftmost first on
   ties, until no pair is a piece;
4. a symbol that is not a piece falls back to its UTF-8 bytes, <0xXX>.

Used by make_tokenizer_vectors.py because transformers' GGUF converter turns
SentencePiece vocabularies into Unigram models, which split differently
from Gemma's own BPE tokenizer (" world" into three pieces)."""
import heapq

import gguf


class SpmBpe:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        tokens = r.fields["tokenizer.ggml.tokens"].contents()
        self.scores = r.fields["tokenizer.ggml.scores"].contents()
        types = r.fields["tokenizer.ggml.token_type"].contents()
        self.ids = {t: i for i, t in enumerate(tokens)}
        add_prefix = r.fields.get("tokenizer.ggml.add_space_prefix")
        self.add_prefix = bool(add_prefix.contents()) if add_prefix else True
        self.user = sorted((t for t, ty in zip(tokens, types) if ty == 4), key=len, reverse=True)
        self.user_first = {}
        for t in self.user:
            self.user_first.setdefault(t[0], []).append(t)

    def encode(self, text):
        out, start, i = [], 0, 0
        while i < len(text):
            match = next((u for u in self.user_first.get(text[i], []) if text.startswith(u, i)), None)
            if match:
                out += self.bpe(text[start:i], start == 0)
                out.append(self.ids[match])
                i += len(match)
                start = i
            else:
                i += 1
        return out + self.bpe(text[start:], start == 0)

    def bpe(self, text, first):
        if not text:
            return []
        if self.add_prefix and first:
            text = " " + text
        sym = list(text.replace(" ", "\u2581"))
        alive = [True] * len(sym)
        nxt = list(range(1, len(sym))) + [-1]
        prv = list(range(-1, len(sym) - 1))
        heap = []

        def push(a):
            b = nxt[a]
            if a >= 0 and b >= 0:
                piece = sym[a] + sym[b]
                if piece in self.ids:
                    heapq.heappush(heap, (-self.scores[self.ids[piece]], a, piece))

        for a in range(len(sym) - 1):
            push(a)
        while heap:
            _, a, piece = heapq.heappop(heap)
            b = nxt[a]
            if not alive[a] or b < 0 or sym[a] + sym[b] != piece:
                continue  # a stale pair: one side merged since
            sym[a], alive[b] = piece, False
            nxt[a] = nxt[b]
            if nxt[b] >= 0:
                prv[nxt[b]] = a
            push(prv[a])
            push(a)
        out = []
        for a in range(len(sym)):
            if not alive[a]:
                continue
            if sym[a] in self.ids:
                out.append(self.ids[sym[a]])
            else:
                out += [self.ids[f"<0x{byte:02X}>"] for byte in sym[a].encode()]
        return out
