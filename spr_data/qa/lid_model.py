"""fastText's prediction for ``lid.176.ftz`` over a whole batch, bit for bit.

Why: fastText spends most of a call per text building strings (24-34 µs a text here); the
same arithmetic over a batch in numpy takes about 6 µs. The words, character n-grams, float
sums (in fastText's order) and glibc's ``expf``/``log`` are fastText's C++ (``predictLine``,
``k=1``), so the label and the float probability are the same, bit for bit (checked on
225,809 texts of every corpus and script, and in ``tests/test_langid_scripts.py``). Where
the answer is not sure (a near tie, a text with ``</s>``), ``spr_data.qa.langid`` asks
fastText itself, as it does for the top three guesses.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["BatchModel", "batch_model"]

_F32, _F64 = np.float32, np.float64
#: the bytes fastText splits words at
_SEPARATORS = np.frombuffer(b" \n\r\t\v\f\0", np.uint8)
_FNV_OFFSET, _FNV_PRIME = np.uint32(2166136261), np.uint32(16777619)
_NO_ROW = np.uint16(65535)
#: rows of texts summed at once: the arrays of one chunk stay in cache
_CHUNK = 4096
#: texts predicted at a time (see BatchModel.predict)
_PREDICT_ROWS = 8192
_WORD_BYTE = ~np.isin(np.arange(256), _SEPARATORS)
#: the greedy path of the tree is the top label when its probability is above one half
_GREEDY_SURE = 0.55
#: below this margin (log) between the two best labels, fastText's own search decides: its
#: pruning and the ``+ 1e-5`` inside its log can order near ties otherwise
_TIE_MARGIN = 1e-3


def _expf(x: np.ndarray) -> np.ndarray:
    """glibc's ``expf``, which fastText calls: Arrow's kernel calls it (numpy's ``exp`` rounds
    some values otherwise)."""
    return np.array(pc.exp(pa.array(x.ravel())).to_numpy()).reshape(x.shape)


def _std_log(x: np.ndarray) -> np.ndarray:
    """fastText's ``std_log``: glibc's ``log(x + 1e-5)`` in double, rounded to float."""
    flat = x.ravel().astype(_F64) + 1e-5
    return np.asarray(pc.ln(pa.array(flat)).to_numpy()).astype(_F32).reshape(x.shape)


class BatchModel:
    """fastText's prediction for ``lid.176.ftz``, on a whole batch with numpy: the same words,
    character n-grams, float sums in the same order and glibc's ``expf``/``log`` as fastText's
    C++ (``predictLine``, ``k=1``), so the same label and the same float probability, bit for
    bit, in about a fifth of the time of a call per text (most of which fastText spends building
    strings).

    Only this model's kind is read (supervised, hierarchical softmax, quantized input with
    norms, dense output, word n-grams 1); :func:`batch_model` returns ``None`` for another.
    """

    def __init__(self, data: bytes) -> None:
        magic, version = struct.unpack_from("<ii", data, 0)
        dim, _, _, _, _, word_ngrams, loss, model, bucket, minn, maxn, _ = struct.unpack_from(
            "<12i", data, 8)
        if (magic, version, loss, model, word_ngrams) != (793712314, 12, 1, 3, 1) or not (
                1 < minn <= maxn <= 4):
            raise ValueError("not a supervised hierarchical-softmax fastText model")
        size, nwords, nlabels = struct.unpack_from("<iii", data, 64)
        npruned = struct.unpack_from("<q", data, 84)[0]
        at, words, counts = 92, [], []
        for _ in range(size):
            end = data.index(b"\0", at)
            words.append(data[at:end].decode())
            counts.append(struct.unpack_from("<q", data, end + 1)[0])
            at = end + 10  # count (int64), type (int8)
        pruned = np.frombuffer(data, "<i4", 2 * npruned, at).reshape(-1, 2)
        at += 8 * npruned
        if data[at:at + 2] != b"\x01\x01" or npruned <= 0:  # quantized input with norms
            raise ValueError("not a pruned, quantized fastText model with norms")
        rows, cols = struct.unpack_from("<qq", data, at + 2)
        codesize = struct.unpack_from("<i", data, at + 18)[0]
        at += 22
        codes = np.frombuffer(data, np.uint8, codesize, at).reshape(rows, -1)
        at += codesize
        pq_dim, nsubq, dsub, lastdsub = struct.unpack_from("<iiii", data, at)
        if not (pq_dim == dim == cols == nsubq * dsub and dsub == lastdsub
                and codes.shape[1] == nsubq and rows == nwords + npruned < _NO_ROW):
            raise ValueError("unexpected product quantizer")
        centroids = np.frombuffer(data, "<f4", dim * 256, at + 16).reshape(nsubq, 256, dsub)
        at += 16 + 4 * dim * 256
        norm_codes = np.frombuffer(data, np.uint8, rows, at)
        at += rows
        if struct.unpack_from("<iiii", data, at) != (1, 1, 1, 1):
            raise ValueError("unexpected norm quantizer")
        norms = np.frombuffer(data, "<f4", 256, at + 16)
        at += 16 + 4 * 256
        orows, ocols = struct.unpack_from("<qq", data, at + 1) if data[at] == 0 else (0, 0)
        if (orows, ocols) != (nlabels, dim) or at + 17 + 4 * orows * ocols != len(data):
            raise ValueError("unexpected output matrix")
        output = np.frombuffer(data, "<f4", orows * ocols, at + 17).reshape(orows, ocols)
        # fastText adds norm * centroid to the hidden vector, the product rounded to float
        decoded = centroids[np.arange(nsubq)[None, :], codes].reshape(rows, dim)
        self.input = (norms[norm_codes][:, None] * decoded).astype(_F32)
        self.output = np.ascontiguousarray(output[: nlabels - 1])  # one row per tree node
        self.dim, self.bucket, self.minn, self.maxn = dim, bucket, minn, maxn
        self.nlabels = nlabels
        self.labels = np.array([w.removeprefix("__label__") for w in words[nwords:]], object)
        self.vocab = pa.array(words[:nwords], pa.string())
        self.eos = words.index("</s>")
        self.ngram_row = np.full(bucket, _NO_ROW, np.uint16)  # pruned n-gram bucket → row
        self.ngram_row[pruned[:, 0]] = nwords + pruned[:, 1]
        self._tree(counts[nwords:])

    def _tree(self, counts: list[int]) -> None:
        """fastText's Huffman tree over the label counts (``buildTree``)."""
        osz = self.nlabels
        count = list(counts) + [10**15] * (osz - 1)
        left, right = [-1] * (2 * osz - 1), [-1] * (2 * osz - 1)
        leaf, node = osz - 1, osz
        for i in range(osz, 2 * osz - 1):
            pair = []
            for _ in range(2):
                if leaf >= 0 and count[leaf] < count[node]:
                    pair.append(leaf)
                    leaf -= 1
                else:
                    pair.append(node)
                    node += 1
            left[i], right[i] = pair
            count[i] = count[pair[0]] + count[pair[1]]
        self.left, self.right = np.array(left), np.array(right)
        depth = [0] * (2 * osz - 1)
        for i in range(2 * osz - 2, osz - 1, -1):
            depth[left[i]] = depth[right[i]] = depth[i] + 1
        self.depth = max(depth)

    def predict(self, texts: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per text (no newline): label, probability, and whether they are fastText's for sure
        (else ask fastText: a near tie, or a text with a ``</s>`` or ``__label__`` word).
        Texts are predicted ``_PREDICT_ROWS`` at a time (each text's answer is its own): a
        32,768-text batch's words, n-grams and sums held about 40 MB at once."""
        parts = [self._predict(texts.slice(lo, _PREDICT_ROWS))
                 for lo in range(0, len(texts), _PREDICT_ROWS)] or [self._predict(texts)]
        label, prob, sure = (np.concatenate(arrays) for arrays in zip(*parts, strict=True))
        return self.labels[label], prob, sure

    def _predict(self, texts: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        hidden, special = self._hidden(texts)
        osz, n = self.nlabels, len(hidden)
        # the greedy path: most rows' label has a probability above one half
        node = np.full(n, 2 * osz - 2)
        score = np.zeros(n, _F32)
        for _ in range(self.depth):
            inner = np.flatnonzero(node >= osz)
            if not len(inner):
                break
            at = node[inner]
            f = _F32(1) / (_F32(1) + _expf(-self._dots(hidden[inner], self.output[at - osz])))
            right = f > 0.5
            score[inner] += _std_log(np.where(right, f, _F32(1) - f))
            node[inner] = np.where(right, self.right[at], self.left[at])
        label, prob = node, _expf(score)
        sure = score >= np.log(_GREEDY_SURE)
        rest = np.flatnonzero(~sure)
        if len(rest):  # the whole tree
            h = hidden[rest]
            dots = np.zeros((len(rest), osz - 1), _F32)
            for j in range(self.dim):  # in fastText's order (dotRow)
                dots += h[:, j:j + 1] * self.output[:, j]
            f = _F32(1) / (_F32(1) + _expf(-dots))
            log_right, log_left = _std_log(f).T, _std_log(_F32(1) - f).T
            scores = np.zeros((2 * osz - 1, len(rest)), _F32)
            for i in range(2 * osz - 2, osz - 1, -1):
                scores[self.left[i]] = scores[i] + log_left[i - osz]
                scores[self.right[i]] = scores[i] + log_right[i - osz]
            leaves = scores[:osz]
            label[rest] = leaves.argmax(axis=0)
            top2 = np.partition(leaves, osz - 2, axis=0)[osz - 2:]
            prob[rest] = _expf(top2[1])
            sure[rest] = (top2[1] - top2[0]) > _TIE_MARGIN
        return label, prob, sure & ~special

    def _dots(self, hidden: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Row by row dot products, summed in fastText's order."""
        out = np.zeros(len(hidden), _F32)
        for j in range(self.dim):
            out += hidden[:, j] * rows[:, j]
        return out

    def _hidden(self, texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """fastText's hidden vector of each text: the mean of the input rows of its words and
        their character n-grams, and of ``</s>``, added in fastText's order; and which texts
        hold a word with ``</s>`` or ``__label__`` (fastText ends the line at one, or skips
        it as a label: left to fastText)."""
        n = len(texts)
        texts = texts.cast(pa.string())
        _, obuf, dbuf = texts.buffers()
        offsets = np.frombuffer(obuf, np.int32, n + 1, texts.offset * 4).astype(np.int64)
        data = (np.frombuffer(dbuf, np.uint8, offsets[-1] - offsets[0], offsets[0])
                if dbuf is not None else np.zeros(0, np.uint8))
        offsets -= offsets[0]
        lengths = np.diff(offsets)
        # words: runs of bytes between separators, within a row
        in_word = _WORD_BYTE[data]
        begins = np.ones(len(data), bool)
        begins[1:] = ~in_word[:-1]
        begins[offsets[:-1][lengths > 0]] = True
        ends = np.ones(len(data), bool)
        ends[:-1] = ~in_word[1:]
        ends[offsets[1:][lengths > 0] - 1] = True
        begins &= in_word
        starts = np.flatnonzero(begins)
        word_len = np.flatnonzero(in_word & ends) + 1 - starts
        before = np.zeros(len(data) + 1, np.int32)  # words begun before each byte
        np.cumsum(begins, out=before[1:])
        word_row = np.repeat(np.arange(n), np.diff(before[offsets]))
        word_off = np.zeros(len(starts) + 1, np.int32)
        np.cumsum(word_len, out=word_off[1:])
        words = pa.StringArray.from_buffers(len(starts), pa.py_buffer(word_off),
                                            pa.py_buffer(data[in_word]))
        # each distinct word's input rows once (most of a batch's words repeat)
        distinct = words.dictionary_encode()
        word = np.asarray(distinct.indices.to_numpy(zero_copy_only=False))
        odd = np.asarray(pc.or_(pc.match_substring(distinct.dictionary, "</s>"),
                                pc.match_substring(distinct.dictionary, "__label__"))
                         .to_numpy(zero_copy_only=False))
        special = np.zeros(n, bool)
        special[word_row[odd[word]]] = True
        rows, rows_off = self._word_rows(distinct.dictionary)
        count = np.diff(rows_off)[word]
        per_row = np.bincount(word_row, weights=count, minlength=n).astype(np.int64) + 1
        hidden = np.empty((n, self.dim), _F32)
        first_word = np.searchsorted(word_row, np.arange(0, n + _CHUNK, _CHUNK))
        for c, lo in enumerate(range(0, n, _CHUNK)):
            hi = min(n, lo + _CHUNK)
            a, b = first_word[c], first_word[c + 1]
            lens = per_row[lo:hi]
            row_off = np.zeros(hi - lo + 1, np.int64)
            np.cumsum(lens, out=row_off[1:])
            # the words' rows one after the other, then </s>
            k = count[a:b]
            of = np.repeat(np.arange(b - a), k)  # the word each of its rows comes from
            at = np.arange(len(of))
            ids = rows[(rows_off[:-1][word[a:b]] - (np.cumsum(k) - k))[of] + at]
            seq = np.empty(int(row_off[-1]), np.int32)
            seq[row_off[1:] - 1] = self.eos
            seq[at + (word_row[a:b] - lo)[of]] = ids
            # summed one row after the other, as fastText does (numpy's reductions pair them
            # up): rows longest first, so that the rows still adding at step p are a prefix
            order = np.argsort(-lens, kind="stable")
            begin = row_off[:-1][order]
            going = np.searchsorted(-lens[order], -np.arange(int(lens.max(initial=0))), "left")
            acc = np.zeros((hi - lo, self.dim), _F32)
            for p, m in enumerate(going.tolist()):
                acc[:m] += self.input[seq[begin[:m] + p]]
            hidden[lo + order] = acc * (1.0 / lens[order]).astype(_F32)[:, None]
        return hidden, special

    def _word_rows(self, words: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """The input rows fastText adds for each word, in its order (the word's own row if it is
        known, then its character n-grams found in the model), concatenated, and offsets."""
        nword = len(words)
        words = words.cast(pa.string())
        wid = np.asarray(pc.index_in(words, value_set=self.vocab).fill_null(-1)
                         .to_numpy(zero_copy_only=False))
        _, obuf, dbuf = words.buffers()
        offsets = np.frombuffer(obuf, np.int32, nword + 1, words.offset * 4).astype(np.int64)
        data = (np.frombuffer(dbuf, np.uint8, offsets[-1] - offsets[0], offsets[0])
                if dbuf is not None else np.zeros(0, np.uint8))
        word_len = np.diff(offsets)
        # "<word>", whose character n-grams fastText hashes (FNV-1a over sign-extended bytes)
        ext_off = np.zeros(nword + 1, np.int64)
        np.cumsum(word_len + 2, out=ext_off[1:])
        total = int(ext_off[-1])
        ext = np.empty(total, np.uint8)
        inner = np.ones(total, bool)
        inner[ext_off[:-1]] = False
        inner[ext_off[1:] - 1] = False
        ext[inner] = data
        ext[ext_off[:-1]] = ord("<")
        ext[ext_off[1:] - 1] = ord(">")
        is_char = (ext & 0xC0) != 0x80
        char_at = np.flatnonzero(is_char)
        nchar = len(char_at)
        char_len = np.diff(np.append(char_at, total))
        longest = int(char_len.max(initial=1))
        pad = self.maxn  # n-grams past a word's end are dropped below; these keep slices whole
        signed = ext.view(np.int8).astype(np.int32).view(np.uint32)
        byte = [np.zeros(nchar + pad, np.uint32) for _ in range(longest)]
        for k in range(longest):
            has = np.flatnonzero(char_len > k)
            byte[k][has] = signed[char_at[has] + k]
        lens = np.append(char_len, np.ones(pad, np.int64))
        word_chars = (np.add.reduceat(is_char, ext_off[:-1]).astype(np.int64) if nword
                      else np.zeros(0, np.int64))
        first = np.zeros(nword + 1, np.int64)
        np.cumsum(word_chars, out=first[1:])
        char_word = np.repeat(np.arange(nword), word_chars)
        left = first[1:][char_word] - np.arange(nchar)  # characters from this one to the end
        slots = np.full((nchar, 1 + self.maxn - self.minn + 1), -1, np.int32)
        slots[first[:-1], 0] = wid  # a known word's own row comes before its n-grams
        h = np.full(nchar, _FNV_OFFSET, np.uint32)
        for size in range(1, self.maxn + 1):
            sl = slice(size - 1, size - 1 + nchar)
            h = (h ^ byte[0][sl]) * _FNV_PRIME
            for k in range(1, longest):
                more = np.flatnonzero(lens[sl] > k)
                h[more] = (h[more] ^ byte[k][sl][more]) * _FNV_PRIME
            if size >= self.minn:
                row = self.ngram_row[h % np.uint32(self.bucket)].astype(np.int32)
                slots[:, 1 + size - self.minn] = np.where(
                    (left >= size) & (row != _NO_ROW), row, -1)
        flat = slots.ravel()
        keep = np.flatnonzero(flat >= 0)
        rows_off = np.zeros(nword + 1, np.int64)
        np.cumsum(np.bincount(char_word[keep // slots.shape[1]], minlength=nword),
                  out=rows_off[1:])
        return flat[keep], rows_off


@lru_cache(maxsize=1)
def batch_model(path: Path) -> BatchModel | None:
    """The model at ``path`` read for batches, or ``None`` for a model of another kind
    (then fastText answers, text by text). Read once per process."""
    try:
        return BatchModel(path.read_bytes())
    except (ValueError, struct.error, IndexError):  # another model: fastText, text by text
        return None
