"""Attention over packed rows (docs/lab-notes/packing.md): SDPA with the dense block-diagonal mask (what the engine
runs), FlexAttention with a document mask (eager, and compiled), and nested-jagged SDPA over the sequences, forward +
backward, at the mini model's attention (4 heads of 64) on rows of 128 tokens. `python
docs/lab-notes/attention_packed_measure.py` prints one dict of milliseconds (the jagged timing includes building the
nested tensor, as a step would)."""
import time, statistics, torch, torch.nn.functional as F
torch.manual_seed(0)
torch.set_num_threads(2)
A, D, T, R = 4, 64, 128, 32  # heads, head size, row length, rows
g = torch.Generator().manual_seed(0)
lens = []
while sum(lens) < R * T * 0.95:
    lens.append(int(torch.randint(20, 129, (1,), generator=g)))
# first-fit decreasing into rows
rows, free = [], []
for n in sorted(lens, reverse=True):
    r = next((i for i, f in enumerate(free) if f >= n), None)
    if r is None:
        rows.append([]); free.append(T); r = len(rows) - 1
    rows[r].append(n); free[r] -= n
B = len(rows)
sid = torch.full((B, T), -1)
for r, members in enumerate(rows):
    c = 0
    for k, n in enumerate(members):
        sid[r, c:c + n] = k; c += n
mask = (sid[:, :, None] == sid[:, None, :])[:, None]
q, k, v = (torch.randn(B, A, T, D, requires_grad=True) for _ in range(3))

def timeit(fn, n=10):
    for _ in range(2): fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return 1e3 * statistics.median(ts)

def sdpa():
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
res = {"rows": B, "sequences": len(lens), "sdpa_dense_mask_ms": timeit(sdpa)}
def sdpa_nomask():
    F.scaled_dot_product_attention(q, k, v).sum().backward()
res["sdpa_no_mask_ms (not exact: for scale)"] = timeit(sdpa_nomask)
try:
    from torch.nn.attention.flex_attention import flex_attention, create_block_mask
    doc = sid.clone()
    def mask_mod(b, h, qi, ki):
        return (doc[b, qi] == doc[b, ki]) & (doc[b, qi] >= 0)
    bm = create_block_mask(mask_mod, B, None, T, T, device="cpu")
    def flex():
        flex_attention(q, k, v, block_mask=bm).sum().backward()
    res["flex_eager_ms"] = timeit(flex, 3)
    cflex = torch.compile(flex_attention)
    t0 = time.perf_counter(); cflex(q, k, v, block_mask=bm).sum().backward(); res["flex_compile_s"] = time.perf_counter() - t0
    def flexc():
        cflex(q, k, v, block_mask=bm).sum().backward()
    res["flex_compiled_ms"] = timeit(flexc)
except Exception as e:
    res["flex_error"] = f"{type(e).__name__}: {str(e)[:200]}"
try:
    seqs = [n for r in rows for n in r]
    qs = [torch.randn(A, n, D) for n in seqs]
    def njt():
        qq = torch.nested.nested_tensor([x.transpose(0, 1) for x in qs], layout=torch.jagged, requires_grad=True)  # (S, j, A, D)
        x = qq.transpose(1, 2)  # (S, A, j, D)
        F.scaled_dot_product_attention(x, x, x).values().sum().backward() if hasattr(x, "values") else None
    res["njt_sdpa_ms"] = timeit(njt, 5)
except Exception as e:
    res["njt_error"] = f"{type(e).__name__}: {str(e)[:200]}"
print(res)
