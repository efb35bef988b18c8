"""The Triton kernel behind decode_triton.py, in a module of its own: it imports Triton, which
only CUDA builds of torch ship, so it is imported only where it runs."""

import triton
import triton.language as tl


@triton.jit
def paged_decode_kernel(
    q_ptr,  # [B, heads, head_dim]
    k_ptr,  # [kv_heads, num_blocks, block_size, head_dim]
    v_ptr,
    tables_ptr,  # [B, table_width] int64
    lengths_ptr,  # [B] int64: keys each row attends to, its own token included
    out_ptr,  # [B, heads, head_dim]
    scale,
    window,  # a sliding window's span in keys (beyond any context where the layer has none)
    table_width,
    num_blocks,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    heads = tl.num_programs(1) * GROUP
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_SIZE)
    g_ok = g < GROUP
    d_ok = d < HEAD_DIM
    q_rows = (row * heads + kv_head * GROUP + g) * HEAD_DIM
    q = tl.load(q_ptr + q_rows[:, None] + d[None, :], mask=g_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
    length = tl.load(lengths_ptr + row)
    first = tl.maximum(length - window, 0)  # the first key in the window
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for b in range(first // BLOCK_SIZE, (length + BLOCK_SIZE - 1) // BLOCK_SIZE):  # the first block holds a key in reach
        block = tl.load(tables_ptr + row * table_width + b)
        slots = ((kv_head * num_blocks + block) * BLOCK_SIZE + t) * HEAD_DIM  # [BLOCK_SIZE]
        k = tl.load(k_ptr + slots[:, None] + d[None, :], mask=d_ok[None, :], other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale  # [BLOCK_G, BLOCK_SIZE]
        position = b * BLOCK_SIZE + t
        in_reach = (position < length) & (position >= first)
        s = tl.where(in_reach[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + slots[:, None] + d[None, :], mask=in_reach[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(out_ptr + q_rows[:, None] + d[None, :], out.to(out_ptr.dtype.element_ty), mask=g_ok[:, None] & d_ok[None, :])


next_power_of_2 = triton.next_power_of_2
