#!/usr/bin/env python3
"""Small seeds for scripts/fuzz.sh: real tokenizers cut to their first N tokens.

A fuzzer's speed is bounded by its inputs' size: a 2 MB tokenizer.json parses ~100 times a second
under ASan, a 20 KB one thousands of times. The cut keeps each file's structure (model type,
pre-tokenizer, normalizer, decoder, special tokens; GGUF key types and order) and its first N
tokens, the merges among them, and special-token ids that still fit (others set to 0).

  python3 scripts/fuzz_seeds.py OUT_DIR FILE...   (tokenizer.json, .gguf, .safetensors files)

A .safetensors file keeps its header's form (and __metadata__) with its tensors of at most 1,024
elements, laid out again to tile the data section.
"""
import json
import os
import struct
import sys

N = 300
SCALAR = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<?', 10: '<Q', 11: '<q', 12: '<d'}


def cut_tokenizer_json(path, out):
    d = json.load(open(path, encoding='utf-8'))
    m = d.get('model', {})
    vocab = m.get('vocab')
    if isinstance(vocab, dict):
        keep = {t: i for t, i in vocab.items() if i < N}
        m['vocab'] = keep
        if isinstance(m.get('merges'), list):
            def ok(mg):
                a, b = mg.split(' ', 1) if isinstance(mg, str) else mg
                return a in keep and b in keep and a + b in keep
            m['merges'] = [mg for mg in m['merges'] if ok(mg)]
    elif isinstance(vocab, list):  # Unigram
        m['vocab'] = vocab[:N]
    d['added_tokens'] = [a for a in d.get('added_tokens', []) if a.get('id', N) < N]
    json.dump(d, open(out, 'w', encoding='utf-8'), ensure_ascii=False)


def read_gguf(path):
    data = open(path, 'rb').read()
    p = 0

    def rd(fmt):
        nonlocal p
        v = struct.unpack_from(fmt, data, p)[0]
        p += struct.calcsize(fmt)
        return v

    def rstr():
        nonlocal p
        n = rd('<Q')
        s = data[p:p + n]
        p += n
        return s

    def rval(t):
        if t in SCALAR:
            return rd(SCALAR[t])
        if t == 8:
            return rstr()
        if t == 9:
            at, n = rd('<I'), rd('<Q')
            return (at, [rval(at) for _ in range(n)])
        raise ValueError(f'{path}: GGUF value type {t}')

    assert data[:4] == b'GGUF', path
    p = 4
    ver, _, nkv = rd('<I'), rd('<Q'), rd('<Q')
    kv = []
    for _ in range(nkv):
        k = rstr()
        t = rd('<I')
        kv.append((k, t, rval(t)))
    return ver, kv


def write_gguf(out, ver, kv):
    b = bytearray(b'GGUF') + struct.pack('<IQQ', ver, 0, len(kv))

    def wval(t, v):
        if t in SCALAR:
            b.extend(struct.pack(SCALAR[t], v))
        elif t == 8:
            b.extend(struct.pack('<Q', len(v)) + v)
        else:
            at, items = v
            b.extend(struct.pack('<IQ', at, len(items)))
            for x in items:
                wval(at, x)

    for k, t, v in kv:
        b.extend(struct.pack('<Q', len(k)) + k + struct.pack('<I', t))
        wval(t, v)
    open(out, 'wb').write(bytes(b))


def cut_gguf(path, out):
    ver, kv = read_gguf(path)
    toks = next((v[1] for k, t, v in kv if k == b'tokenizer.ggml.tokens'), [])
    keep = set(toks[:N])
    res = []
    for k, t, v in kv:
        if t == 9 and k in (b'tokenizer.ggml.tokens', b'tokenizer.ggml.scores', b'tokenizer.ggml.token_type'):
            v = (v[0], v[1][:N])
        elif t == 9 and k == b'tokenizer.ggml.merges':
            v = (v[0], [m for m in v[1] if b' ' in m and all(x in keep for x in m.split(b' ', 1))
                        and m.replace(b' ', b'', 1) in keep])
        elif k.startswith(b'tokenizer.ggml.') and k.endswith(b'_token_id') and t in SCALAR and v >= N:
            v = 0
        res.append((k, t, v))
    write_gguf(out, ver, res)


def cut_safetensors(path, out):
    data = open(path, 'rb').read()
    n = struct.unpack_from('<Q', data, 0)[0]
    h = json.loads(data[8:8 + n])
    body = data[8 + n:]
    new_h, chunks, off = {}, [], 0
    for name, e in sorted(h.items(), key=lambda kv: kv[1]['data_offsets'][0] if kv[0] != '__metadata__' else -1):
        if name == '__metadata__':
            new_h[name] = e
            continue
        b, en = e['data_offsets']
        numel = 1
        for d in e['shape']:
            numel *= d
        if numel > 1024:
            continue
        chunks.append(body[b:en])
        new_h[name] = dict(e, data_offsets=[off, off + en - b])
        off += en - b
    hb = json.dumps(new_h).encode()
    hb += b' ' * (-len(hb) % 8)
    open(out, 'wb').write(struct.pack('<Q', len(hb)) + hb + b''.join(chunks))


def main():
    out = sys.argv[1]
    for f in sys.argv[2:]:
        name = 'cut-' + f.strip('./').replace('/', '_')
        try:
            if f.endswith('.gguf'):
                cut_gguf(f, os.path.join(out, name))
            elif f.endswith('.safetensors'):
                cut_safetensors(f, os.path.join(out, name))
            else:
                cut_tokenizer_json(f, os.path.join(out, name))
        except Exception as e:  # a file this script cannot cut is simply not a seed
            print(f'fuzz_seeds: skipped {f}: {e}', file=sys.stderr)


if __name__ == '__main__':
    main()
