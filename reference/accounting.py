"""Accounting reference: parameters and forward matmul FLOPs (2*m*n*p per matmul)."""


def transformer_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff) -> dict[str, int]:
    V, T, d, L = vocab_size, context_length, d_model, num_layers
    params = {
        "params.token_embeddings": V * d,
        "params.attention": L * 4 * d * d,
        "params.ffn": L * 3 * d * d_ff,
        "params.norms": L * 2 * d + d,
        "params.lm_head": V * d,
    }
    flops = {
        "flops.attention_projections": L * (2 * T * d * 3 * d + 2 * T * d * d),
        "flops.attention_scores": L * 2 * T * T * d,
        "flops.attention_values": L * 2 * T * T * d,
        "flops.ffn": L * 3 * 2 * T * d * d_ff,
        "flops.lm_head": 2 * T * d * V,
    }
    return {**params, "params.total": sum(params.values()), **flops, "flops.total": sum(flops.values())}
